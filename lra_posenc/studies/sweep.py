"""Trains every (encoding variant, seed) pair of a comparison and tabulates the results.

    python -m lra_posenc.studies.sweep --task=listops --config=configs/listops/lra.py:sweep \\
        --seeds=0,1,2 --output_dir=runs/sweeps/listops_cpu
    python -m lra_posenc.studies.sweep --task=translation --config=configs/translation/multi30k.py:sweep \\
        --variants=none,sinusoidal,learned,rope,chebyshev,legendre --seeds=0 \\
        --output_dir=runs/sweeps/multi30k_cpu --set=data.data_dir=../shared/data/multi30k

A variant is an encoding name, optionally with overrides: `legendre:grid=open:position_offset=1` (a key without
a dot is an option of that encoding) or `chebyshev:model.pos_encoding_placement=after_encoder` (a dotted key is any
config key). An encoding outside the package is named in the config argument,
`--config=CONFIG_FILE:VARIANT,encoding_module=PATH` (docs/encodings.md), then in --variants as any other.
`--config.KEY=VALUE`, as in training (or `--set KEY=VALUE`), applies to every run. Every run's config is checked
before any trains (in a process of its own, so this one never holds an accelerator); the first bad key is an error
naming it, and the variant where only its overrides are at fault.

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
import concurrent.futures
import csv
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

import ml_collections
import numpy as np
from absl import flags

from lra_posenc import encodings, tasks
from lra_posenc.config_files import config_of_flags, encoding_module_of
from lra_posenc.data.files import written_whole
from lra_posenc.plots import comparison_figure, save_line_plot
from lra_posenc.run_folders import Variant, mean_and_std, mean_std_cell, parse_override, parse_variant
from lra_posenc.tasks import TaskSpec
from lra_posenc.training import run_files
from lra_posenc.training.cli import user_error_message
from lra_posenc.training.run_files import (CONFIG_FILE, RESULTS_FILE, TRAIN_LOG, read_history, read_json_if_present,
                                           write_json)
from lra_posenc.validation import comma_separated

WALL_TIME_FILE = 'sweep_wall_time.json'
LABEL_COLUMNS = ('variant', 'seed', 'device')  # A run's labels; every other column of a row is a figure.


def config_flags_of(config: str, overrides: Sequence[tuple[str, str]]) -> list[str]:
  """The command-line flags that give a training command `config` (PATH[:ARG]) with `overrides`."""
  return [f'--config={config}', *(f'--config.{key}={value}' for key, value in overrides)]


def training_command(task: TaskSpec, config: str, workdir: str, seed: int,
                     overrides: Sequence[tuple[str, str]]) -> list[str]:
  """The command that trains one run: the task's program on `config` with the seed, then `overrides`."""
  config_flag, *override_flags = config_flags_of(config, [('seed', str(seed)), *overrides])
  return [sys.executable, '-m', task.module, config_flag, f'--workdir={workdir}', *override_flags]


def run_config(config: str, overrides: Sequence[tuple[str, str]]) -> ml_collections.ConfigDict:
  """The config a training command of `config` (PATH[:ARG]) with `overrides` builds, parsed as its flags are."""
  return config_of_flags(config_flags_of(config, overrides))


def check_run_configs(task_name: str, config: str, variants: Sequence[Variant],
                      settings: Sequence[tuple[str, str]] = ()) -> None:
  """Raises ValueError, naming the bad key (and the variant, where only its overrides are bad), if any run's
  config would fail to train: one error now, not one per run in its train.log.

  The checks run in a process of their own: they count the devices, which starts an accelerator's backend,
  and this process would then hold most of its memory while the runs train.
  """
  with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context('spawn')) as pool:
    error = pool.submit(config_error, task_name, config, [variant.spec for variant in variants],
                        list(settings)).result()
  if error:
    raise ValueError(error)


def config_error(task_name: str, config: str, variant_specs: Sequence[str],
                 settings: Sequence[tuple[str, str]]) -> str | None:
  """What `check_run_configs` reports, as training would (None: every run's config is valid): the shared
  config and settings first, then each variant's overrides."""
  task = tasks.find(task_name)
  try:
    encoding_module_of(config)  # This process's registry, as the sweep's and each run's.
  except ValueError as error:
    return str(error)
  for label, overrides in [('', list(settings))] + [
      (f'variant {spec!r}: ', list(settings) + list(parse_variant(spec).overrides)) for spec in variant_specs]:
    try:
      run = run_config(config, overrides)
    except (KeyError, AttributeError, OSError, flags.Error) as error:  # As training's flag parsing fails.
      return label + user_error_message(error, config_flags_of(config, overrides), parsing=True)
    try:
      task.read_settings(run)
    except ValueError as error:
      return label + str(error)
  return None


def run_dir(output_dir: str, variant: Variant, seed: int) -> str:
  """The workdir of one (variant, seed) run of a sweep."""
  return os.path.join(output_dir, variant.directory, f'seed_{seed}')


def check_finished_runs_match(config: str, output_dir: str, variants: Sequence[Variant], seeds: Sequence[int],
                              settings: Sequence[tuple[str, str]] = ()) -> None:
  """Raises ValueError naming the runs, and their differing keys, that finished (so a sweep keeps them) with
  another config than the sweep now asks of them: a table would average both settings. Keys only one side has
  (added to the code since the run) are not compared, and options of encodings a run did not select are read as
  `encodings.upgrade_config` reads them."""
  differing = []
  for variant in variants:
    for seed in seeds:
      workdir = run_dir(output_dir, variant, seed)
      saved = read_json_if_present(os.path.join(workdir, CONFIG_FILE))
      if saved is None or not os.path.exists(os.path.join(workdir, RESULTS_FILE)):
        continue
      encodings.upgrade_config(saved['model'])  # Unselected encodings' options at a former default: no effect.
      wanted = run_config(config, [('seed', str(seed)), *settings, *variant.overrides]).to_dict()
      saved, wanted = _flat_items(saved), _flat_items(json.loads(json.dumps(wanted)))
      keys = [key for key in sorted(saved.keys() & wanted.keys()) if saved[key] != wanted[key]]
      if keys:
        differing.append(f'{workdir}: ' + ', '.join(f'{key}={saved[key]!r} (now {wanted[key]!r})' for key in keys))
  if differing:
    raise ValueError('finished runs were trained with other settings than this sweep asks; use another '
                     '--output_dir, or the settings they had:\n  ' + '\n  '.join(differing))


def _flat_items(tree: dict, prefix: str = '') -> dict[str, object]:
  """A nested dict's leaves by dotted key."""
  items = {}
  for key, value in tree.items():
    items |= _flat_items(value, f'{prefix}{key}.') if isinstance(value, dict) else {f'{prefix}{key}': value}
  return items


class RunningTrainings:
  """The training processes a sweep has running. A SIGTERM to the sweep (`forward_termination`) is passed to each
  of them, which save a checkpoint and exit, and no further run starts; otherwise a sweep killed alone would leave
  its trainings running, and the same command again would start a second trainer in their workdirs."""

  def __init__(self):
    self._processes: set[subprocess.Popen] = set()
    self._lock = threading.Lock()
    self.stopping = threading.Event()

  def add(self, process: subprocess.Popen) -> None:
    with self._lock:
      self._processes.add(process)
      if self.stopping.is_set():  # Started as the signal came: it stops too.
        process.send_signal(signal.SIGTERM)

  def discard(self, process: subprocess.Popen) -> None:
    with self._lock:
      self._processes.discard(process)

  def forward_termination(self, signum: int, frame: object) -> None:
    """A SIGTERM handler: every running training gets the signal; nothing new starts."""
    del frame
    with self._lock:
      self.stopping.set()
      for process in self._processes:
        process.send_signal(signum)


def run_training(command: Sequence[str], workdir: str, env: dict[str, str] | None = None,
                 running: RunningTrainings | None = None) -> int:
  """Runs one training to the end, logging to train.log; adds its wall time to the workdir's record. With
  `running`, the process is registered there while it runs (a signal to the sweep reaches it)."""
  os.makedirs(workdir, exist_ok=True)
  wall_time_path = os.path.join(workdir, WALL_TIME_FILE)
  record = read_json_if_present(wall_time_path) or {'seconds': 0.0, 'invocations': 0}
  start = time.perf_counter()
  with open(os.path.join(workdir, TRAIN_LOG), 'a') as log:
    log.write(f'$ {" ".join(command)}\n')
    log.flush()
    # In a worker thread: Ctrl-C reaches the main thread, whose pool waits for this run; the run, in the same
    # process group, got it too and saves its checkpoint before it exits.
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    if running is not None:
      running.add(process)
    returncode = process.wait()
    if running is not None:
      running.discard(process)
  write_json(wall_time_path, {'seconds': record['seconds'] + time.perf_counter() - start,
                              'invocations': record['invocations'] + 1})
  return returncode


def steps_to_target(history: Sequence[dict], metric: str, target: float) -> int | None:
  """The first validation step whose `metric` reaches `target`; None if none does."""
  return next((record['step'] for record in history if record.get(metric, float('-inf')) >= target), None)


def run_row(task: TaskSpec, variant: Variant, seed: int, workdir: str, target: float) -> dict | None:
  """One finished run's figures, or None when it has no results.json yet."""
  path = os.path.join(workdir, RESULTS_FILE)
  results = read_json_if_present(path)
  if results is None:
    return None
  if missing := [key for key in ('test_sets', 'validation', 'best_step') if key not in results]:
    raise ValueError(f'{path}: no {", ".join(missing)}; not a results.json the trainer wrote')
  row = {'variant': variant.spec, 'seed': seed, 'device': trained_on(results.get('provenance'))}
  for split, scores in results['test_sets'].items():
    for metric in task.test_metrics:
      row[f'{split} {metric}'] = scores.get(metric)  # Runs older than a metric lack it.
  row[f'best validation {task.validation_metric}'] = results['validation'][task.validation_metric]
  if task.recorded_columns:
    row |= task.recorded_columns(results)
  row['best step'] = results['best_step']
  row['last step'] = results.get('step')  # Where training ended: the step budget, patience or a signal.
  averaged = results.get('averaged')  # evaluation.average_last > 0: the mean of the last checkpoints, scored too.
  if averaged:
    for split, scores in averaged['test_sets'].items():
      for metric in task.test_metrics:
        row[f'averaged {split} {metric}'] = scores.get(metric)
    row[f'averaged validation {task.validation_metric}'] = averaged['validation'][task.validation_metric]
  row[f'steps to validation {task.validation_metric} {target:g}'] = steps_to_target(
      read_history(workdir, 'validation'), task.validation_metric, target)
  row['train minutes'] = results['train_seconds_total'] / 60 if 'train_seconds_total' in results else None
  wall_time = read_json_if_present(os.path.join(workdir, WALL_TIME_FILE))  # Written by run_training only.
  row['wall minutes'] = wall_time['seconds'] / 60 if wall_time else None
  return row


def trained_on(run_provenance: dict | None) -> str | None:
  """The devices a run trained on, as its provenance names them ('CPU (AMD EPYC (family 25, model 1; avx2,
  fma), 2 cores)', 'NVIDIA H100 80GB HBM3'); None for a run older than the record.

  A CPU is named with its family and model number, which tell apart hosts of one model name and different
  speeds; runs before 2026-11-23 recorded no host CPU.
  """
  if not run_provenance:
    return None
  devices = run_provenance['devices']
  if devices['platform'] == 'cpu':
    cpu = run_provenance.get('host_cpu')
    name = f'CPU ({run_files.describe_cpu(cpu)})' if cpu else 'CPU (model not recorded)'
  else:
    name = devices['kind']
  return f"{devices['count']} x {name}" if devices['count'] > 1 else name


def variant_summaries(rows: Sequence[dict], variants: Sequence[Variant]) -> list[dict]:
  """Per variant: for every numeric column of any row, the values over seeds (None where a run lacks the
  column), their mean and std (ddof=1)."""
  columns = [c for c in dict.fromkeys(column for row in rows for column in row) if c not in LABEL_COLUMNS]
  summaries = []
  for variant in variants:
    own = [row for row in rows if row['variant'] == variant.spec]
    if not own:
      continue
    summary = {'variant': variant.spec, 'seeds': [row['seed'] for row in own],
               'devices': [row.get('device') for row in own], 'columns': {},
               'seeds best at last step': [row['seed'] for row in own if _best_at_last_step(row)]}
    for column in columns:
      values = [row.get(column) for row in own]
      summary['columns'][column] = {'values': values, **mean_and_std(values)}
    summaries.append(summary)
  return summaries


def _best_at_last_step(row: dict) -> bool:
  """Whether a run's best checkpoint is the step its training ended at: validation was still rising."""
  return row.get('last step') is not None and row.get('best step') == row['last step']  # Older runs: never.


def budget_note(summaries: Sequence[dict]) -> str:
  """A line naming the runs whose best checkpoint is their last step, whose scores are therefore those of
  a budget, not of a plateau; empty when there are none."""
  runs = [f"{summary['variant']} seed {seed}" for summary in summaries for seed in summary['seeds best at last step']]
  if not runs:
    return ''
  return (f'\nBest checkpoint at the last step, validation still rising when training ended ({len(runs)} of '
          f"{sum(len(summary['seeds']) for summary in summaries)} runs; scores of this budget, not of a plateau): "
          f"{', '.join(runs)}.\n")


def unfinished_note(unfinished: dict[str, list[int]]) -> str:
  """A line naming the runs asked for that have no results.json (not trained, or still training), whose
  variants' figures are over fewer seeds; empty when every run finished."""
  if not unfinished:
    return ''
  return ('\nNot finished (no results.json), so not in the table: '
          + '; '.join(f"{variant} seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
                      for variant, seeds in unfinished.items()) + '.\n')


def device_note(summaries: Sequence[dict]) -> str:
  """A line naming where each run trained when the runs used more than one kind of device (their train
  minutes then compare only within one); empty when they all used one."""
  runs = {}
  for summary in summaries:
    for seed, device in zip(summary['seeds'], summary['devices']):
      runs.setdefault(device or 'not recorded', []).append(f"{summary['variant']} seed {seed}")
  if len(runs) < 2:
    return ''
  return ('\nTrained on more than one kind of device (train minutes compare within one only): '
          + '; '.join(f"{device}: {', '.join(names)}" for device, names in runs.items()) + '.\n')


def summary_table(summaries: Sequence[dict], digits: dict[str, int]) -> str:
  """Mean ± std per column; a column some seeds lack (a target never reached, a metric newer than the run)
  says how many have it."""
  columns = list(summaries[0]['columns'])
  lines = ['| variant | seeds | ' + ' | '.join(columns) + ' |', '| --- ' * (len(columns) + 2) + '|']
  for summary in summaries:
    cells = [summary['variant'], str(len(summary['seeds']))]
    for column in columns:
      stats = summary['columns'][column]
      places = next((d for key, d in digits.items() if key in column), 3)
      if stats['mean'] is None:  # No run has it: a target none reached, or a metric newer than every run.
        cells.append('not reached' if column.startswith('steps to') else 'n/a')
        continue
      cell = mean_std_cell(stats, places)
      if stats['count'] < len(stats['values']):  # Seeds that never reached the target, or predate the metric.
        cell += f" ({stats['count']}/{len(stats['values'])} {'reached' if column.startswith('steps to') else 'runs'})"
      cells.append(cell)
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines) + '\n'


def plot_convergence(histories: dict[str, list[list[dict]]], metric: str, label: str, path: str, title: str) -> None:
  """Validation `metric` (`label` on the axis) against step: per variant the mean over the seeds validated at
  each step (a seed stopped early by patience leaves the rest), shaded min to max."""
  figure, axes = comparison_figure(len(histories))
  for variant, runs in histories.items():
    steps = sorted({record['step'] for run in runs for record in run})
    if not steps:
      continue
    scores = [{record['step']: record[metric] for record in run} for run in runs]
    values = np.array([[seen.get(step, np.nan) for step in steps] for seen in scores])
    line, = axes.plot(steps, np.nanmean(values, 0), label=f'{variant} (n={len(runs)})')
    if len(runs) > 1:
      axes.fill_between(steps, np.nanmin(values, 0), np.nanmax(values, 0), color=line.get_color(), alpha=0.15)
  axes.set(xlabel='training step', ylabel=label, title=title)
  save_line_plot(figure, axes, path, legend_title='mean over the seeds\nvalidated at each step;\nshaded: min to max')


def tabulate(task: TaskSpec, variants: Sequence[Variant], seeds: Sequence[int], output_dir: str,
             target: float, report_dir: str) -> list[dict]:
  """Writes runs.csv, summary.json, summary.md and convergence.png into `report_dir` from the finished runs."""
  rows, histories, unfinished = [], {}, {}
  for variant in variants:
    for seed in seeds:
      workdir = run_dir(output_dir, variant, seed)
      row = run_row(task, variant, seed, workdir, target)
      if row is None:
        unfinished.setdefault(variant.spec, []).append(seed)
      else:
        rows.append(row)
        histories.setdefault(variant.spec, []).append(read_history(workdir, 'validation'))
  if not rows:
    raise FileNotFoundError(f'{output_dir}: no finished runs to tabulate')
  columns = list(dict.fromkeys(column for row in rows for column in row))
  os.makedirs(report_dir, exist_ok=True)
  with written_whole(os.path.join(report_dir, 'runs.csv'), newline='') as f:
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
  summaries = variant_summaries(rows, variants)
  write_json(os.path.join(report_dir, 'summary.json'), summaries, sort_keys=False)
  table = summary_table(summaries, digits={'step': 0, 'minutes': 1, 'validation': 3, 'accuracy': 3, 'bleu': 2})
  table += budget_note(summaries) + unfinished_note(unfinished) + device_note(summaries)
  with written_whole(os.path.join(report_dir, 'summary.md')) as f:
    f.write(table)
  plot_convergence(histories, task.validation_metric, task.validation_label,
                   os.path.join(report_dir, 'convergence.png'),
                   f'{task.validation_label} during training ({os.path.basename(os.path.normpath(output_dir))})')
  print(table)
  return summaries


def train_all(task: TaskSpec, config: str, output_dir: str, variants: Sequence[Variant], seeds: Sequence[int],
              settings: Sequence[tuple[str, str]] = (), jobs: int = 1) -> list[str]:
  """Trains every unfinished (variant, seed) run of `config` with the `settings` overrides, up to `jobs` at once;
  returns the workdirs that failed, or were stopped or never started because the sweep got a SIGTERM (which it
  passes to its running trainings: they save and exit, and the same command later resumes them)."""
  env = dict(os.environ)
  if jobs > 1:
    env.setdefault('XLA_PYTHON_CLIENT_MEM_FRACTION', f'{0.9 / jobs:.3f}')

  running = RunningTrainings()

  def train(variant: Variant, seed: int) -> str | None:
    workdir = run_dir(output_dir, variant, seed)
    if running.stopping.is_set():
      return workdir
    print(f'training {variant.spec} seed {seed} in {workdir}', flush=True)
    command = training_command(task, config, workdir, seed, list(settings) + list(variant.overrides))
    if run_training(command, workdir, env, running):
      print(f'FAILED: {variant.spec} seed {seed}; see {os.path.join(workdir, TRAIN_LOG)}', flush=True)
      return workdir
    return None

  # Seed-major: every variant has a first result before any has a second.
  pending = [(variant, seed) for seed in seeds for variant in variants
             if not os.path.exists(os.path.join(run_dir(output_dir, variant, seed), RESULTS_FILE))]
  previous = signal.signal(signal.SIGTERM, running.forward_termination)
  try:
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
      return [workdir for workdir in pool.map(lambda run_args: train(*run_args), pending) if workdir]
  finally:
    signal.signal(signal.SIGTERM, previous)


def parse_setting(text: str) -> tuple[str, str]:
  """A --set (or --config.) KEY=VALUE, as argparse wants its errors."""
  try:
    return parse_override(text)
  except ValueError as error:
    raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--task', required=True, type=tasks.argument, help=tasks.ARGUMENT_HELP)
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
  task = args.task
  try:
    encoding_module_of(args.config)  # An encoding outside the package, registered before variants name it.
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
      check_run_configs(task.name, args.config, variants, args.settings)
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
