#!/usr/bin/env python3
"""Scores the best checkpoints of a sweep by input length, beyond the lengths seen in training.

    python scripts/length_generalisation.py --task=listops --sweep_dir=runs/sweeps/listops_cpu \\
        --bounds=64,128,256,512 --num_samples=500
    python scripts/length_generalisation.py --task=translation --sweep_dir=runs/sweeps/multi30k_cpu \\
        --bounds=1,11,21,31,41
    python scripts/length_generalisation.py --task=listops --sweep_dir=runs/sweeps/listops_cpu --by=depth

ListOps: for every bucket [bounds[i], bounds[i+1]) tokens, a test set is drawn from the
run's own generator options (tree depth, arguments, labels) with only the length window
changed, into SWEEP_DIR/length_generalisation/data; training lengths lie below bounds[0],
so the sets are disjoint from training. The run's own test split is the first column.
Translation: the hypotheses the run wrote for its test splits, pooled, scored with
sacreBLEU per bucket of source length in the run's SentencePiece ids (training dropped
pairs over data.max_length ids).

With --by=depth (ListOps) the columns are the nesting depths of each run's own test split
instead (`lra_posenc.listops.evaluate`, which writes WORKDIR/evaluations/test.json), each
with the majority class of its expressions; the report goes to SWEEP_DIR/depth.

An encoding that cannot extrapolate (learned, chebyshev with its max_len normalisation)
is reported as such for the buckets it cannot read. Writes runs.csv, summary.json,
summary.md and length_generalisation.png into SWEEP_DIR/length_generalisation (or --report_dir).
Each run's scores are kept in its workdir (length_scores.json), so a re-run scores only new runs.

With --paired_with=RUNS_CSV (another report's runs.csv: the same encodings and seeds trained
differently, e.g. for fewer steps) it also writes paired.md and paired.json: per encoding and
bucket, both means and each seed's change, runs paired by encoding and seed directory.
"""
import argparse
import csv
import dataclasses
import json
import os
import random
from collections.abc import Callable, Sequence

import jax
import numpy as np

from lra_posenc import encodings
from lra_posenc.data import listops as generator
from lra_posenc.listops import evaluate as listops_evaluate
from lra_posenc.listops import input_pipeline as listops_input
from lra_posenc.listops import train as listops_train
from lra_posenc.sweeps import (CANNOT_EXTRAPOLATE, comparison_figure, length_table, mean_and_std, mean_std_cell,
                               save_line_plot, spec_of_directory)
from lra_posenc.tasks import TASKS
from lra_posenc.training.checkpointing import read_config, restore_best
from lra_posenc.training.workdir import write_json
from lra_posenc.translation import bleu
from lra_posenc.translation import input_pipeline as translation_input
from lra_posenc.translation import train as translation_train

CACHE_FILE = 'length_scores.json'


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
      if os.path.exists(os.path.join(workdir, 'results.json')):
        runs.append((spec_of_directory(variant), workdir))
  if not runs:
    raise FileNotFoundError(f'{sweep_dir}: no finished runs (VARIANT/seed_S/results.json)')
  return runs


def bucket_label(low: int, high: int) -> str:
  return f'{low}-{high - 1}'


def listops_length_set(spec: dict, low: int, high: int, num_samples: int, data_dir: str) -> str:
  """basic-format TSV of `num_samples` expressions of low..high-1 tokens from generator `spec`, reused if present."""
  options = generator.GeneratorOptions.from_spec(spec, longer_than=low - 1, shorter_than=high)
  name = '_'.join(f'{k}{v}' for k, v in sorted(dataclasses.asdict(options).items()))
  path = os.path.join(data_dir, f'length_{bucket_label(low, high)}_seed{spec["seed"]}_n{num_samples}_{name}.tsv')
  if not os.path.exists(path):
    os.makedirs(data_dir, exist_ok=True)
    generator.write_tsv(path, generator.generate(num_samples, options, random.Random(spec['seed'] * 1_000_003 + low)))
  return path


def listops_scores(workdir: str, bounds: Sequence[int], num_samples: int, data_dir: str) -> dict[str, dict]:
  """Per bucket: accuracy of the best checkpoint (None if the encoding cannot reach it) and the majority class."""
  config, params, _ = restore_best(workdir)
  model = listops_train.create_model(config)
  metrics = jax.jit(lambda p, batch: listops_train.classification_metrics(model, p, batch, None))
  test_dir = listops_train.data_directory(config, workdir)
  sets = {f'test (<= {config.data.max_length})': (os.path.join(test_dir, 'basic_test.tsv'), config.data.max_length)}
  for low, high in zip(bounds[:-1], bounds[1:]):
    sets[bucket_label(low, high)] = (listops_length_set(config.data.generator, low, high, num_samples, data_dir),
                                     high - 1)
  scores = {}
  for label, (path, max_length) in sets.items():
    dataset, _ = listops_input.read_split(path, max_length=max_length, num_classes=config.data.num_classes)
    targets = dataset.arrays['targets']
    majority = float(np.bincount(targets).max() / len(targets))
    try:
      sums = [jax.device_get(metrics(params, batch)) for batch in dataset.eval_batches(config.evaluation.batch_size)]
    except encodings.CannotExtrapolate:
      scores[label] = {'score': None, 'majority': majority, 'examples': len(targets)}
      continue
    score = sum(float(s['accuracy']) for s in sums) / sum(float(s['count']) for s in sums)
    scores[label] = {'score': score, 'majority': majority, 'examples': len(targets)}
  return scores


def listops_depth_scores(workdir: str) -> dict[str, dict]:
  """Per nesting depth of the run's own test split: accuracy of the best checkpoint and that depth's majority class."""
  data_dir = listops_train.data_directory(read_config(workdir), workdir)
  report = listops_evaluate.evaluate_file(workdir, os.path.join(data_dir, 'basic_test.tsv'), split_name='test')
  return {depth: {'score': group['accuracy'], 'majority': group['majority_class_accuracy'],
                  'examples': group['examples']} for depth, group in report['by_depth'].items()}


def translation_scores(workdir: str, bounds: Sequence[int]) -> dict[str, dict]:
  """Per bucket of source length (SentencePiece ids): sacreBLEU of the written hypotheses, pooled over test splits."""
  data = read_config(workdir).data
  tokenizers = translation_input.workdir_tokenizers(workdir, data.tokenizer)
  sources, hypotheses, references = [], [], []
  for split in data.test_splits:
    text = translation_train.read_text(data, split)
    written = translation_train.read_translations(
        translation_train.translations_path(workdir, split, data.target_lang), len(text.targets))
    sources += text.sources
    hypotheses += written
    references += text.targets
  lengths = np.array([len(ids) for ids in tokenizers.encode_sources(sources)])
  edges = list(bounds[:-1]) + [bounds[-1], np.iinfo(np.int32).max]
  scores = {}
  for low, high in zip(edges[:-1], edges[1:]):
    rows = np.flatnonzero((lengths >= low) & (lengths < high))
    label = bucket_label(low, high) if high != edges[-1] else f'{low}+'
    if len(rows):
      score = bleu.sacrebleu_scores([hypotheses[i] for i in rows], [references[i] for i in rows],
                                    lowercase=tokenizers.lowercase)['bleu']
      scores[label] = {'score': score, 'examples': int(len(rows))}
  return scores


def cached(workdir: str, key: str, score: Callable[[], dict]) -> dict:
  """`score()`, kept in WORKDIR/length_scores.json under `key` so that re-runs score only new runs."""
  path = os.path.join(workdir, CACHE_FILE)
  cache = {}
  if os.path.exists(path):
    with open(path) as f:
      cache = json.load(f)
  if key not in cache:
    cache[key] = score()
    write_json(path, cache, sort_keys=False)  # Buckets in the order scored: the table's column order.
  return cache[key]


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
  with open(path, newline='') as f:
    return [row | {'score': float(row['score']) if row['score'] else None} for row in csv.DictReader(f)]


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


def plot_title(task: str, by: str, sweep_dir: str) -> str:
  what = 'ListOps test accuracy' if task == 'listops' else 'sacreBLEU of the test translations'
  return f'{what} {BREAKDOWNS[by][1]} ({os.path.basename(os.path.normpath(sweep_dir))})'


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--task', required=True, choices=sorted(TASKS))
  parser.add_argument('--sweep_dir', required=True, help='An --output_dir of scripts/sweep.py.')
  parser.add_argument('--by', choices=sorted(BREAKDOWNS), default='length',
                      help='Buckets of input length (beyond training), or (ListOps) nesting depths of the test split.')
  parser.add_argument('--bounds', help='Comma-separated increasing bucket edges, in tokens (required to score by '
                      'length).')
  parser.add_argument('--num_samples', type=int, default=500, help='ListOps: expressions per bucket.')
  parser.add_argument('--report_dir', help='Where the tables and plot go (default: SWEEP_DIR/length_generalisation).')
  parser.add_argument('--paired_with', help="Another report's runs.csv (the same encodings and seeds trained "
                      'differently): also write paired.md and paired.json, each seed\'s change against it.')
  parser.add_argument('--replot', action='store_true',
                      help="Redraw the plot from REPORT_DIR's summary.json alone (no runs needed); --bounds unused.")
  args = parser.parse_args(argv)
  xlabel, _, folder, plot_file = BREAKDOWNS[args.by]
  output_dir = args.report_dir or os.path.join(args.sweep_dir, folder)
  ylabel = 'test accuracy' if args.task == 'listops' else 'sacreBLEU'
  draw = lambda summary, buckets, baseline: plot(summary, buckets, baseline, xlabel, ylabel,
                                                 os.path.join(output_dir, plot_file),
                                                 plot_title(args.task, args.by, args.sweep_dir))
  if args.replot:
    with open(os.path.join(output_dir, 'summary.json')) as f:
      saved = json.load(f)
    draw(saved['variants'], saved['buckets'], saved['majority_class'])
    return
  if args.by == 'depth' and args.task != 'listops':
    parser.error('--by=depth needs --task=listops (nesting depth is a ListOps property)')
  if args.by == 'length' and not args.bounds:
    parser.error('--bounds is required (unless --replot or --by=depth)')
  bounds = [int(b) for b in args.bounds.split(',')] if args.by == 'length' else []
  if args.by == 'length' and (len(bounds) < 2 or bounds != sorted(set(bounds)) or bounds[0] < 1):
    parser.error(f'--bounds={args.bounds}: need at least two increasing positive edges')
  rows, baseline = [], {}
  for variant, workdir in finished_runs(args.sweep_dir):
    if args.by == 'depth':
      scores = cached(workdir, 'listops depth', lambda: listops_depth_scores(workdir))
    elif args.task == 'listops':
      data_dir = os.path.join(args.sweep_dir, 'length_generalisation', 'data')
      scores = cached(workdir, f'listops {bounds} {args.num_samples}',
                      lambda: listops_scores(workdir, bounds, args.num_samples, data_dir))
    else:
      scores = cached(workdir, f'translation {bounds}', lambda: translation_scores(workdir, bounds))
    for bucket, score in scores.items():
      rows.append({'variant': variant, 'workdir': workdir, 'bucket': bucket, 'score': score['score'],
                   'examples': score['examples']})
      if 'majority' in score:
        baseline[bucket] = score['majority']
    print(workdir, {b: s['score'] for b, s in scores.items()}, flush=True)
  buckets = list(dict.fromkeys(row['bucket'] for row in rows))
  if args.by == 'depth':  # Runs may differ in which depths their test splits hold.
    buckets.sort(key=int)
  summary = bucket_summaries(rows)
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, 'runs.csv'), 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  with open(os.path.join(output_dir, 'summary.json'), 'w') as f:
    json.dump({'buckets': buckets, 'variants': summary, 'majority_class': baseline or None}, f, indent=2)
  table = length_table(summary, buckets, baseline or None, digits=3 if args.task == 'listops' else 2)
  with open(os.path.join(output_dir, 'summary.md'), 'w') as f:
    f.write(table)
  draw(summary, buckets, baseline or None)
  print(table)
  if args.paired_with:
    paired = paired_changes(rows, read_runs_csv(args.paired_with))
    if not paired:
      raise ValueError(f'--paired_with={args.paired_with}: no run of this report has the same variant, seed '
                       'directory and bucket there')
    with open(os.path.join(output_dir, 'paired.json'), 'w') as f:
      json.dump({'paired_with': args.paired_with, 'variants': paired}, f, indent=2)
    table = paired_table(paired, buckets, args.paired_with, digits=3 if args.task == 'listops' else 2)
    with open(os.path.join(output_dir, 'paired.md'), 'w') as f:
      f.write(table)
    print(table)


if __name__ == '__main__':
  main()
