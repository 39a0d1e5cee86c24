#!/usr/bin/env python3
"""Trains every (encoding variant, seed) pair of a comparison and tabulates the results.

    python scripts/sweep.py --task=listops --config=configs/listops/lra.py:sweep \\
        --seeds=0,1,2 --output_dir=runs/sweeps/listops_cpu
    python scripts/sweep.py --task=translation --config=configs/translation/multi30k.py:sweep \\
        --variants=none,sinusoidal,learned,rope,chebyshev,legendre --seeds=0 \\
        --output_dir=runs/sweeps/multi30k_cpu --set=data.data_dir=../shared/data/multi30k

A variant is an encoding name, optionally with overrides: `legendre:grid=open:position_offset=1`
(a key without a dot is an option of that encoding) or `chebyshev:model.pos_encoding_placement=after_encoder`
(a dotted key is any config key). `--config.KEY=VALUE`, as in training (or `--set KEY=VALUE`),
applies to every run. Every run's config is checked before any trains (in a process of its own, so this one
never holds an accelerator); the first bad key is an error naming it, and the variant where only its overrides
are at fault.

Each run is the task's own training command in OUTPUT_DIR/VARIANT/seed_S, its output
in train.log there. --jobs=N trains up to N runs at once, for an accelerator that small runs
leave mostly idle (each then preallocates 0.9/N of a GPU's memory unless
XLA_PYTHON_CLIENT_MEM_FRACTION is set); on a 2-core CPU keep 1. Runs compiling the same programs
(a variant's seeds, a resumed run) share the trainer's persistent compilation cache
(docs/training.md). Finished runs (results.json) are skipped and interrupted ones resume from their checkpoints, so re-running the command
completes a sweep; adding seeds or variants only trains the new runs. Then it writes, into OUTPUT_DIR (or --report_dir):
  runs.csv       one row per run: test scores, best validation score and its step, the step training
                 ended at, steps to the target, training and wall time (and the averaged checkpoint's test
                 and validation scores, where evaluation.average_last > 0);
  summary.json   per variant: mean, std (over seeds, ddof=1) and values of each column, and the seeds
                 whose best checkpoint is their last step (still improving when training ended);
  summary.md     the same as a Markdown table, with a line naming those runs;
  convergence.png  validation metric against step, mean over seeds with a min-max band.
--tabulate_only rebuilds these from the runs already there.
"""
import argparse
import sys
from collections.abc import Sequence

from lra_posenc import encodings
from lra_posenc.comparison import check_finished_runs_match, check_run_configs, tabulate, train_all
from lra_posenc.sweeps import parse_override, parse_variant
from lra_posenc.tasks import TASKS
from lra_posenc.validation import comma_separated


def parse_setting(text: str) -> tuple[str, str]:
  """A --set (or --config.) KEY=VALUE, as argparse wants its errors."""
  try:
    return parse_override(text)
  except ValueError as error:
    raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--task', required=True, choices=sorted(TASKS))
  parser.add_argument('--config', required=True, help='Config file and variant, e.g. configs/listops/lra.py:sweep.')
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--variants', default=','.join(encodings.REGISTRY),
                      help='Comma-separated NAME[:KEY=VALUE]... (default: every registered encoding).')
  parser.add_argument('--seeds', default='0,1,2', help='Comma-separated config.seed values.')
  parser.add_argument('--set', dest='settings', action='append', type=parse_setting, default=[],
                      metavar='KEY=VALUE', help='A config override for every run (repeatable).')
  parser.add_argument('--target', type=float, default=None,
                      help='Validation score for the steps-to-target column (default: per task).')
  parser.add_argument('--report_dir', help='Where the tables and plots go (default: --output_dir), e.g. results/.')
  parser.add_argument('--tabulate_only', action='store_true', help='Do not train; tabulate finished runs.')
  parser.add_argument('--jobs', type=int, default=1, help='Runs trained at once (for an accelerator; default 1).')
  args, unknown = parser.parse_known_args(argv)
  for arg in unknown:  # Training's override syntax, accepted here too.
    if not arg.startswith('--config.'):
      parser.error(f'unrecognized argument: {arg}')
    try:
      args.settings.append(parse_override(arg.removeprefix('--config.')))
    except ValueError:
      parser.error(f'{arg} is not --config.KEY=VALUE')
  task = TASKS[args.task]
  try:
    variants = [parse_variant(spec) for spec in args.variants.split(',')]
    seeds = comma_separated('--seeds', args.seeds, int)
  except ValueError as error:
    parser.error(str(error))
  # One run per variant and seed: a repeat would be counted twice in the tables, or trained twice in one workdir.
  for flag, names in (('--variants', [variant.directory for variant in variants]), ('--seeds', seeds)):
    if repeated := sorted({name for name in names if names.count(name) > 1}):
      parser.error(f'{flag} names {", ".join(map(str, repeated))} more than once')
  if any(key == 'seed' for key, _ in args.settings):
    parser.error('seed is set per run by --seeds, not by --set or --config.seed')
  if args.jobs < 1:
    parser.error(f'--jobs={args.jobs}: at least 1')
  if not args.tabulate_only:
    try:
      check_run_configs(args.task, args.config, variants, args.settings)
      check_finished_runs_match(args.config, args.output_dir, variants, seeds, args.settings)
    except ValueError as error:
      parser.error(str(error))
  failed = [] if args.tabulate_only else train_all(task, args.config, args.output_dir, variants, seeds,
                                                   args.settings, args.jobs)
  # Where every run failed or was stopped (a SIGTERM), there is nothing to tabulate: the failures are the report.
  if len(failed) < len(variants) * len(seeds) or args.tabulate_only:
    tabulate(task, variants, seeds, args.output_dir, task.default_target if args.target is None else args.target,
             args.report_dir or args.output_dir)
  if failed:
    sys.exit(f'{len(failed)} run(s) failed: {failed}')


if __name__ == '__main__':
  main()
