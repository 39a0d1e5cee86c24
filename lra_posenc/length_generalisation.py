"""Runs of a comparison scored by input length (or nesting depth): the scores each run keeps, summaries over
seeds, pairings with an earlier report, tables and the plot (`scripts/length_generalisation.py` writes them)."""
import csv
import os
from collections.abc import Callable, Sequence

import numpy as np

from lra_posenc import encodings
from lra_posenc.data.files import read_csv_figures, written_whole
from lra_posenc.sweeps import (CANNOT_EXTRAPOLATE, comparison_figure, length_table, mean_and_std, mean_std_cell,
                               save_line_plot, seed_of_run, spec_of_directory)
from lra_posenc.tasks import TASKS, TaskSpec
from lra_posenc.training.workdir import RESULTS_FILE, read_json, read_json_if_present, write_json

CACHE_FILE = 'length_scores.json'
SCORED_RUN = 'scored run'  # In CACHE_FILE: the steps of results.json when the run was scored.


def finished_runs(sweep_dir: str) -> list[tuple[str, str]]:
  """(variant, workdir) of every run with a results.json, encodings in registry order."""
  runs = []
  order = list(encodings.REGISTRY)
  for variant in sorted(os.listdir(sweep_dir), key=lambda d: (order.index(d.split('__')[0]) if d.split('__')[0]
                                                              in order else len(order), d)):
    variant_dir = os.path.join(sweep_dir, variant)
    if not os.path.isdir(variant_dir):
      continue
    for seed_dir in sorted(os.listdir(variant_dir)):
      workdir = os.path.join(variant_dir, seed_dir)
      if os.path.exists(os.path.join(workdir, RESULTS_FILE)):
        seed_of_run(workdir)  # A copied seed_0_old/ is not one more seed.
        runs.append((spec_of_directory(variant), workdir))
  if not runs:
    raise FileNotFoundError(f'{sweep_dir}: no finished runs (VARIANT/seed_S/results.json)')
  return runs


def length_set_key(task: str, by: str, bounds: Sequence[int], num_samples: int,
                   recorded: Sequence[str] = ()) -> str:
  """What a run's scores are kept under: what they depend on, so that other bounds or samples score anew
  ('listops [64, 128, 256, 512] 500'; by depth, 'listops depth'; from recorded statistics, with CHECKPOINT:BLEU)."""
  if by == 'depth':
    return f'{task} depth'
  if recorded:
    return f'{task} {list(bounds)} source words {":".join(recorded)}'
  return f'{task} {list(bounds)}' + (f' {num_samples}' if TASKS[task].draws_length_sets else '')


def length_scores(workdir: str) -> dict[str, dict]:
  """The length sets kept in WORKDIR/length_scores.json for the run as it stands (set -> bucket -> score):
  none if the run has trained on since they were scored, its best or last step having moved (files from before
  that record are trusted)."""
  return _kept_scores(workdir, _run_steps(workdir))


def _kept_scores(workdir: str, run_steps: dict[str, int | None]) -> dict[str, dict]:
  """length_scores, for a run whose steps are RUN_STEPS."""
  kept = read_json_if_present(os.path.join(workdir, CACHE_FILE)) or {}
  scored_run = kept.pop(SCORED_RUN, None)
  return {} if scored_run is not None and scored_run != run_steps else kept


def _run_steps(workdir: str) -> dict[str, int | None]:
  """What tells one state of a run from the next: its best and last steps."""
  results = read_json(os.path.join(workdir, RESULTS_FILE))
  return {'best_step': results['best_step'], 'step': results.get('step')}


def cached(workdir: str, key: str, score: Callable[[], dict | None]) -> dict | None:
  """`score()`, kept in WORKDIR/length_scores.json under `key` with the run's steps, so that re-runs score only
  new runs and runs trained on since (None, a run with nothing to score, is not kept)."""
  run_steps = _run_steps(workdir)
  kept = _kept_scores(workdir, run_steps)
  if key not in kept:
    scores = score()
    if scores is None:
      return None
    kept[key] = scores
    # Buckets in the order scored: the table's column order.
    write_json(os.path.join(workdir, CACHE_FILE), {SCORED_RUN: run_steps, **kept}, sort_keys=False)
  return kept[key]


def bucket_summaries(rows: Sequence[dict]) -> dict[str, dict[str, dict]]:
  """variant -> bucket -> mean, std (ddof=1), values, examples."""
  summary: dict[str, dict[str, dict]] = {}
  for row in rows:
    cell = summary.setdefault(row['variant'], {}).setdefault(row['bucket'], {'values': [], 'examples': row['examples']})
    cell['values'].append(row['score'])
  for buckets in summary.values():
    for cell in buckets.values():
      stats = mean_and_std(cell['values'])
      cell['mean'], cell['std'] = stats['mean'], stats['std']
  return summary


def read_runs_csv(path: str) -> list[dict]:
  """The rows of a report's runs.csv, scores as floats; an empty score (cannot extrapolate) is None."""
  return read_csv_figures(path, lambda column: column == 'score')


def paired_changes(rows: Sequence[dict], earlier: Sequence[dict]) -> dict[str, dict[str, dict]]:
  """variant -> bucket -> seeds, scores here ('now'), in `earlier` ('before') and each seed's change.

  A run is paired with the earlier run of its variant and seed directory (seed_S); a seed, or a
  bucket, without a score on both sides is left out, so every change is one seed's own.
  """
  def key(row: dict) -> tuple[str, str, str]:
    return row['variant'], os.path.basename(os.path.normpath(row['workdir'])), row['bucket']

  before = {key(row): row['score'] for row in earlier}
  paired: dict[str, dict[str, dict]] = {}
  for row in rows:
    variant, seed, bucket = key(row)
    earlier_score = before.get((variant, seed, bucket))
    if row['score'] is None or earlier_score is None:
      continue
    cell = paired.setdefault(variant, {}).setdefault(bucket, {'seeds': [], 'now': [], 'before': [], 'changes': []})
    cell['seeds'].append(seed)
    cell['now'].append(row['score'])
    cell['before'].append(earlier_score)
    cell['changes'].append(row['score'] - earlier_score)
  return paired


def paired_table(paired: dict, buckets: Sequence[str], earlier: str, digits: int) -> str:
  """Three rows per variant: this report's mean ± std, the earlier one's, and the mean change (then each seed's)."""
  lines = [f'Paired with {earlier}, by encoding and seed.', '',
           '| variant | runs | ' + ' | '.join(buckets) + ' |', '| --- ' * (len(buckets) + 2) + '|']
  for variant, cells in paired.items():
    rows = {'this report': [], 'paired with': [], 'change, per seed': []}
    for bucket in buckets:
      cell = cells.get(bucket)
      if cell is None:
        for row in rows.values():
          row.append('')
        continue
      rows['this report'].append(mean_std_cell(mean_and_std(cell['now']), digits))
      rows['paired with'].append(mean_std_cell(mean_and_std(cell['before']), digits))
      changes = ', '.join(f'{change:+.{digits}f}' for change in cell['changes'])
      rows['change, per seed'].append(f"{mean_and_std(cell['changes'])['mean']:+.{digits}f} ({changes})")
    for i, (label, row) in enumerate(rows.items()):
      lines.append(f"| {variant if i == 0 else ''} | {label} | " + ' | '.join(row) + ' |')
  return '\n'.join(lines) + '\n'


def plot(summary: dict, buckets: Sequence[str], baseline: dict[str, float] | None, xlabel: str, ylabel: str,
         path: str, title: str) -> None:
  """Mean score per bucket (of length or depth) and variant, error bars one std over seeds.

  A variant that cannot read the longer buckets is drawn dotted with hollow markers and
  said to be in its legend entry, with a cross at the bottom of each bucket it cannot read.
  """
  figure, axes = comparison_figure(len(summary))
  positions = np.arange(len(buckets))
  blind = 0  # Variants drawn so far that cannot extrapolate: their crosses sit side by side.
  for variant, cells in summary.items():
    readable = [b in cells and cells[b]['mean'] is not None for b in buckets]
    means = [cells[b]['mean'] if ok else np.nan for b, ok in zip(buckets, readable)]
    stds = [(cells[b]['std'] or 0.0) if ok else np.nan for b, ok in zip(buckets, readable)]
    unreadable = [p for p, b, ok in zip(positions, buckets, readable) if b in cells and not ok]
    style = dict(linestyle=':', markerfacecolor='none') if unreadable else {}
    label = variant + (f' ({CANNOT_EXTRAPOLATE}: x)' if unreadable else '')
    line = axes.errorbar(positions, means, yerr=stds, marker='o', capsize=3, label=label, **style)
    if unreadable:
      axes.plot(np.asarray(unreadable) + 0.08 * blind, [0.02] * len(unreadable), 'x', color=line[0].get_color(),
                markersize=9, markeredgewidth=2, transform=axes.get_xaxis_transform(), clip_on=False)
      blind += 1
  if baseline:
    axes.plot(positions, [baseline[b] for b in buckets], 'k--', label='majority class')
  axes.set_xticks(positions, buckets)
  axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
  seeds = max(len(cell['values']) for cells in summary.values() for cell in cells.values())
  save_line_plot(figure, axes, path, legend_title='one run each' if seeds == 1 else
                 f'mean over {seeds} seeds, bars: 1 std')


# What --by can break scores down by: x-axis label, title, default report folder and plot file.
BREAKDOWNS = {
    'length': ('length bucket (tokens)', 'by input length, beyond the training lengths', 'length_generalisation',
               'length_generalisation.png'),
    'depth': ('nesting depth', "by nesting depth of each run's test split", 'depth', 'accuracy_by_depth.png'),
}


def plot_title(task: TaskSpec, by: str, sweep_dir: str) -> str:
  """The plot's title: the task's score, the breakdown and the sweep's name."""
  return f'{task.test_score_title} {BREAKDOWNS[by][1]} ({sweep_name(sweep_dir)})'


def sweep_name(sweep_dir: str) -> str:
  """What a sweep is called in titles: its folder, or its study's for a committed STUDY/runs."""
  path = os.path.normpath(sweep_dir)
  return os.path.basename(os.path.dirname(path) if os.path.basename(path) == 'runs' else path)


def write_report(rows: Sequence[dict], buckets: Sequence[str], baseline: dict[str, float], output_dir: str,
                 digits: int) -> tuple[dict, str]:
  """runs.csv, summary.json and summary.md of `rows` (one per run and bucket) into `output_dir`; returns the
  summary and its table."""
  summary = bucket_summaries(rows)
  os.makedirs(output_dir, exist_ok=True)
  with written_whole(os.path.join(output_dir, 'runs.csv'), newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  write_json(os.path.join(output_dir, 'summary.json'),
             {'buckets': list(buckets), 'variants': summary, 'majority_class': baseline or None}, sort_keys=False)
  table = length_table(summary, buckets, baseline or None, digits=digits)
  with written_whole(os.path.join(output_dir, 'summary.md')) as f:
    f.write(table)
  return summary, table


def write_paired_report(rows: Sequence[dict], buckets: Sequence[str], paired_with: str, output_dir: str,
                        digits: int) -> str:
  """paired.json and paired.md: `rows` against the runs.csv at `paired_with`, by encoding and seed; returns the
  table."""
  paired = paired_changes(rows, read_runs_csv(paired_with))
  if not paired:
    raise ValueError(f'--paired_with={paired_with}: no run of this report has the same variant, seed '
                     'directory and bucket there')
  write_json(os.path.join(output_dir, 'paired.json'), {'paired_with': paired_with, 'variants': paired},
             sort_keys=False)
  table = paired_table(paired, buckets, paired_with, digits=digits)
  with written_whole(os.path.join(output_dir, 'paired.md')) as f:
    f.write(table)
  return table
