"""Scores the best checkpoints of a sweep by input length, beyond the lengths seen in training.

    python -m lra_posenc.studies.length_generalisation --task=listops --sweep_dir=runs/sweeps/listops_cpu \\
        --bounds=64,128,256,512 --num_samples=500
    python -m lra_posenc.studies.length_generalisation --task=translation --sweep_dir=runs/sweeps/multi30k_cpu \\
        --bounds=1,11,21,31,41
    python -m lra_posenc.studies.length_generalisation --task=listops --sweep_dir=runs/sweeps/listops_cpu --by=depth
    python -m lra_posenc.studies.length_generalisation --task=translation --sweep_dir=results/multi30k_tiny/runs \\
        --recorded=averaged:tokenized_bleu --data_dir=../shared/data/multi30k --bounds=1,11,16,21 \\
        --report_dir=results/multi30k_tiny/length_generalisation

ListOps: for every bucket [bounds[i], bounds[i+1]) tokens, a test set is drawn from the
run's own generator options (tree depth, arguments, labels) with only the length window
changed, into SWEEP_DIR/length_generalisation/data; training lengths lie below bounds[0],
so the sets are disjoint from training. The run's own test split is the first column.
Translation: the hypotheses the run wrote for its test splits, pooled, scored with
sacreBLEU per bucket of source length in the run's SentencePiece ids (training dropped
pairs over data.max_length ids). With --recorded=CHECKPOINT:BLEU (`best` or `averaged`; `bleu` or
`tokenized_bleu`), runs committed without their translations and tokenizer are scored from the sentence
statistics they recorded (bleu_statistics.json; runs without them are skipped, and named), by source length
in whitespace-separated words, with the test text read from --data_dir.

With --by=depth (ListOps) the columns are the nesting depths of each run's own test split
instead (`lra_posenc.listops.evaluate`, which writes WORKDIR/evaluations/test.json), each
with the majority class of its expressions; the report goes to SWEEP_DIR/depth.

An encoding that cannot extrapolate (learned, chebyshev with its max_len normalisation)
is reported as such for the buckets it cannot read. Writes runs.csv, summary.json,
summary.md and length_generalisation.png into SWEEP_DIR/length_generalisation (or --report_dir).
Each run's scores are kept in its workdir (length_scores.json), so a re-run scores only new runs and runs trained
on since they were scored.

With --paired_with=RUNS_CSV (another report's runs.csv: the same encodings and seeds trained
differently, e.g. for fewer steps) it also writes paired.md and paired.json: per encoding and
bucket, both means and each seed's change, runs paired by encoding and seed directory.

With --merge SUMMARY... it runs nothing and makes one table of earlier reports' summary.json files (by length,
by depth, other sweeps): a study's encodings are often spread over sweeps trained in different sessions, each with
its own reports. The merged table has a row per variant (in order of first appearance, or --variants') and a column
per bucket (the union, in order of first appearance); each cell comes from the first summary that scores that
variant in that bucket, and a list under the table names the summaries each row drew on. Where two summaries share
a bucket, their majority classes must agree (the same evaluation set), or the merge refuses, naming the bucket.
    python -m lra_posenc.studies.length_generalisation \\
        --merge results/listops_3000_steps/sweeps/listops_cpu/length_generalisation/summary.json \\
        results/listops_3000_steps/sweeps/listops_cpu/depth/summary.json --report_dir=results/listops_3000_steps
"""
import argparse
import csv
import json
import os
from collections.abc import Callable, Sequence

import numpy as np

from lra_posenc import encodings, tasks
from lra_posenc.data.files import read_csv_figures, written_whole
from lra_posenc.plots import comparison_figure, save_line_plot
from lra_posenc.run_folders import mean_and_std, mean_std_cell, seed_of_run, spec_of_directory
from lra_posenc.tasks import TaskSpec
from lra_posenc.training.run_files import RESULTS_FILE, read_json, read_json_if_present, write_json
from lra_posenc.validation import comma_separated

# A length-table cell whose encoding has no value past its training length (a learned table).
CANNOT_EXTRAPOLATE = 'cannot extrapolate'

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
  return f'{task} {list(bounds)}' + (f' {num_samples}' if tasks.find(task).draws_length_sets else '')


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


def length_table(summary: dict, buckets: Sequence[str], baseline: dict[str, float] | None, digits: int) -> str:
  """Markdown: a row per variant of mean ± std by length (or depth) bucket, the majority class and the examples
  per bucket; a variant whose encoding has no value past its training length reads CANNOT_EXTRAPOLATE."""
  lines = ['| variant | ' + ' | '.join(buckets) + ' |', '| --- ' * (len(buckets) + 1) + '|']
  for variant, cells in summary.items():
    row = []
    for bucket in buckets:
      cell = cells.get(bucket)
      if cell is None:
        row.append('')
      elif cell['mean'] is None:
        row.append(CANNOT_EXTRAPOLATE)
      else:
        row.append(mean_std_cell(cell, digits) + (f" (n={len(cell['values'])})" if len(cell['values']) > 1 else ''))
    lines.append(f'| {variant} | ' + ' | '.join(row) + ' |')
  if baseline:
    lines.append('| majority class | ' + ' | '.join(f'{baseline[b]:.{digits}f}' for b in buckets) + ' |')
  # Each bucket's count from the first row that has it (merged tables hold rows without some buckets).
  examples = {b: cells[b]['examples'] for cells in reversed(summary.values()) for b in cells}
  lines.append('| examples | ' + ' | '.join(str(examples.get(b, '')) for b in buckets) + ' |')
  return '\n'.join(lines) + '\n'


def merge_length_summaries(summaries: dict[str, dict], variants: Sequence[str] | None = None) -> dict:
  """Length (or depth) summaries, by name, as one, each cell from the first that scores it: buckets, variants,
  majority_class, and sources (variant -> names); refuses summaries whose majority classes differ in a bucket."""
  buckets, rows, majority, sources = [], {}, {}, {}
  for name, summary in summaries.items():
    for bucket in summary['buckets']:
      if bucket not in buckets:
        buckets.append(bucket)
      share = (summary.get('majority_class') or {}).get(bucket)
      if share is not None and majority.setdefault(bucket, share) != share:
        raise ValueError(f'{name}: bucket {bucket!r} has majority class {share}, an earlier summary '
                         f'{majority[bucket]}: not the same evaluation set')
    for variant, cells in summary['variants'].items():
      row = rows.setdefault(variant, {})
      for bucket, cell in cells.items():
        if bucket not in row:
          row[bucket] = cell
          if name not in sources.setdefault(variant, []):
            sources[variant].append(name)
  if variants is not None:
    missing = [v for v in variants if v not in rows]
    if missing:
      raise ValueError(f'no summary scores {missing}; the variants there: {sorted(rows)}')
    rows = {v: rows[v] for v in variants}
  return {'buckets': buckets, 'variants': rows, 'majority_class': majority,
          'sources': {v: sources[v] for v in rows}}


def merge_reports(paths: Sequence[str], variants: Sequence[str] | None, report_dir: str, digits: int) -> str:
  """--merge: the summary.json files at `paths` as one table, written to REPORT_DIR/summary.json and summary.md
  with the summaries each row drew on; returns the table."""
  summaries = {}
  for path in paths:
    with open(path) as f:
      summaries[os.path.dirname(os.path.normpath(path))] = json.load(f)
  merged = merge_length_summaries(summaries, variants)
  table = length_table(merged['variants'], merged['buckets'], merged['majority_class'] or None, digits)
  table += '\nCells from:\n' + ''.join(f"- {variant}: {', '.join(names)}\n"
                                       for variant, names in merged['sources'].items())
  os.makedirs(report_dir, exist_ok=True)
  write_json(os.path.join(report_dir, 'summary.json'), merged, sort_keys=False)
  with written_whole(os.path.join(report_dir, 'summary.md')) as f:
    f.write(table)
  return table


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--task', type=tasks.argument, help=tasks.ARGUMENT_HELP + ' Required unless --merge.')
  parser.add_argument('--sweep_dir', help='An --output_dir of lra_posenc.studies.sweep (required unless --merge).')
  parser.add_argument('--by', choices=sorted(BREAKDOWNS), default='length',
                      help='Buckets of input length (beyond training), or (ListOps) nesting depths of the test split.')
  parser.add_argument('--bounds', help='Comma-separated increasing bucket edges, in tokens (words with --recorded; '
                      'required to score by length): buckets [b_i, b_i+1); for translation one more, b_last and '
                      'longer, so every test sentence from bounds[0] up is scored.')
  parser.add_argument('--num_samples', type=int, default=500, help='ListOps: expressions per bucket.')
  parser.add_argument('--report_dir', help='Where the tables and plot go (default: SWEEP_DIR/length_generalisation).')
  parser.add_argument('--paired_with', help="Another report's runs.csv (the same encodings and seeds trained "
                      'differently): also write paired.md and paired.json, each seed\'s change against it.')
  parser.add_argument('--recorded', metavar='CHECKPOINT:BLEU',
                      help='Translation: score from the recorded sentence statistics of CHECKPOINT (best, averaged) '
                      'for BLEU (bleu, tokenized_bleu), by source words; the test text from --data_dir.')
  parser.add_argument('--data_dir', help='With --recorded: the raw test files (SPLIT.LANG[.gz]).')
  parser.add_argument('--replot', action='store_true',
                      help="Redraw the plot from REPORT_DIR's summary.json alone (no runs needed); --bounds unused.")
  parser.add_argument('--merge', nargs='+', metavar='SUMMARY',
                      help="Earlier reports' summary.json files to merge into one table in --report_dir (no run read).")
  parser.add_argument('--variants', help='With --merge: the variants to keep, comma-separated, in this order '
                      '(default: all).')
  parser.add_argument('--digits', type=int, default=3, help='With --merge: decimal places (default 3).')
  args = parser.parse_args(argv)
  if args.merge:
    if not args.report_dir:
      parser.error('--merge needs --report_dir')
    try:
      print(merge_reports(args.merge, args.variants.split(',') if args.variants else None,
                          args.report_dir, args.digits), end='')
    except ValueError as error:
      parser.error(str(error))
    return
  if not (args.task and args.sweep_dir):
    parser.error('--task and --sweep_dir are required (unless --merge)')
  xlabel, _, folder, plot_file = BREAKDOWNS[args.by]
  output_dir = args.report_dir or os.path.join(args.sweep_dir, folder)
  task = args.task
  score_label, title = task.test_score_label, plot_title(task, args.by, args.sweep_dir)
  if args.data_dir and not args.recorded:
    parser.error('--data_dir: only --recorded reads test text from it')
  if args.recorded:
    recorded = parse_recorded(parser, args, task)
    xlabel, score_label = 'source length (words)', f'{recorded[1]}, {recorded[0]} checkpoint'
    title = f'{score_label}, by source length ({sweep_name(args.sweep_dir)})'
  draw = lambda summary, buckets, baseline: plot(summary, buckets, baseline, xlabel, score_label,
                                                 os.path.join(output_dir, plot_file), title)
  if args.replot:
    with open(os.path.join(output_dir, 'summary.json')) as f:
      saved = json.load(f)
    draw(saved['variants'], saved['buckets'], saved['majority_class'])
    return
  if args.by == 'depth' and task.scores_by_depth is None:
    parser.error(f'--by=depth: the inputs of --task={task.name} have no nesting depth')
  if args.by == 'length' and not args.bounds:
    parser.error('--bounds is required (unless --replot or --by=depth)')
  if args.num_samples < 1:
    parser.error(f'--num_samples={args.num_samples}: at least 1')
  try:
    bounds = comma_separated('--bounds', args.bounds, int, at_least=1) if args.by == 'length' else []
  except ValueError as error:
    parser.error(str(error))
  if args.by == 'length' and (len(bounds) < 2 or bounds != sorted(set(bounds))):
    parser.error(f'--bounds={args.bounds}: need at least two increasing positive edges')
  drawn_sets_dir = os.path.join(args.sweep_dir, 'length_generalisation', 'data')  # Shared by the runs.
  key = length_set_key(task.name, args.by, bounds, args.num_samples, recorded if args.recorded else ())
  rows, baseline = [], {}
  for variant, workdir in finished_runs(args.sweep_dir):
    if args.recorded:
      scores = cached(workdir, key, lambda: task.scores_by_recorded_length(
          workdir, bounds, checkpoint=recorded[0], bleu_name=recorded[1], data_dir=args.data_dir))
    elif args.by == 'depth':
      scores = cached(workdir, key, lambda: task.scores_by_depth(workdir))
    else:
      scores = cached(workdir, key, lambda: task.scores_by_length(workdir, bounds, num_samples=args.num_samples,
                                                                  data_dir=drawn_sets_dir))
    if scores is None:
      print(f'{workdir}: skipped, it recorded no sentence statistics', flush=True)
      continue
    for bucket, score in scores.items():
      rows.append({'variant': variant, 'workdir': workdir, 'bucket': bucket, 'score': score['score'],
                   'examples': score['examples']})
      if 'majority' in score:
        if baseline.setdefault(bucket, score['majority']) != score['majority']:
          raise ValueError(f"{workdir}: bucket {bucket}'s majority class is {score['majority']}, the other runs' "
                           f'{baseline[bucket]}: their examples differ, so one baseline would be wrong')
    print(workdir, {b: s['score'] for b, s in scores.items()}, flush=True)
  if not rows:
    raise FileNotFoundError(f'{args.sweep_dir}: no finished run recorded sentence statistics to score')
  buckets = list(dict.fromkeys(row['bucket'] for row in rows))
  if args.by == 'depth':  # Runs may differ in which depths their test splits hold.
    buckets.sort(key=int)
  summary, table = write_report(rows, buckets, baseline, output_dir, task.test_score_digits)
  draw(summary, buckets, baseline or None)
  print(table)
  if args.paired_with:
    print(write_paired_report(rows, buckets, args.paired_with, output_dir, task.test_score_digits))


def parse_recorded(parser: argparse.ArgumentParser, args: argparse.Namespace, task: TaskSpec) -> tuple[str, str]:
  """--recorded's (checkpoint, BLEU), checked with the flags it needs."""
  if task.scores_by_recorded_length is None:
    parser.error(f'--recorded: --task={task.name} records no sentence statistics')
  checkpoint, _, name = args.recorded.partition(':')
  checkpoints, scores = task.recorded_choices
  if checkpoint not in checkpoints or name not in scores:
    parser.error(f'--recorded={args.recorded}: want CHECKPOINT:BLEU, CHECKPOINT one of {list(checkpoints)}, '
                 f'BLEU one of {list(scores)}')
  if args.by != 'length' or not (args.data_dir or args.replot):
    parser.error('--recorded scores by length (--by=length) and needs --data_dir')
  return checkpoint, name


if __name__ == '__main__':
  main()
