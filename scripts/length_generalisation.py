#!/usr/bin/env python3
"""Scores the best checkpoints of a sweep by input length, beyond the lengths seen in training.

    python scripts/length_generalisation.py --task=listops --sweep_dir=runs/sweeps/listops_cpu \\
        --bounds=64,128,256,512 --num_samples=500
    python scripts/length_generalisation.py --task=translation --sweep_dir=runs/sweeps/multi30k_cpu \\
        --bounds=1,11,21,31,41
    python scripts/length_generalisation.py --task=listops --sweep_dir=runs/sweeps/listops_cpu --by=depth
    python scripts/length_generalisation.py --task=translation --sweep_dir=results/multi30k_tiny/runs \\
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
"""
import argparse
import json
import os
from collections.abc import Sequence

from lra_posenc.length_generalisation import (BREAKDOWNS, cached, finished_runs, length_set_key, plot, plot_title,
                                              sweep_name, write_paired_report, write_report)
from lra_posenc.tasks import TASKS, TaskSpec
from lra_posenc.validation import comma_separated


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--task', required=True, choices=sorted(TASKS))
  parser.add_argument('--sweep_dir', required=True, help='An --output_dir of scripts/sweep.py.')
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
  args = parser.parse_args(argv)
  xlabel, _, folder, plot_file = BREAKDOWNS[args.by]
  output_dir = args.report_dir or os.path.join(args.sweep_dir, folder)
  task = TASKS[args.task]
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
    parser.error(f'--by=depth: the inputs of --task={args.task} have no nesting depth')
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
  key = length_set_key(args.task, args.by, bounds, args.num_samples, recorded if args.recorded else ())
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
    parser.error(f'--recorded: --task={args.task} records no sentence statistics')
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
