#!/usr/bin/env python3
"""One GPU window's work in one command: benchmarks with profiles first, then training runs by priority.

On a lent GPU (docs/gpu.md), inside one 10-minute command:
    python scripts/gpu_campaign.py --out=$OUT --work=/tmp/campaign --budget_seconds=540 \\
        --data=.gpu_data --peer_models=.gpu_data/wmt_models.py
In order, each step capped so that the whole fits --budget_seconds:
  1. --benchmarks (configs/gpu_benchmarks.py), each in a process of its own (lra_posenc.studies.benchmark,
     scripts/side_by_side_wmt.py, the cuDNN attention tests): steps/s, MFU, compile time, memory and attention
     path, with 20 more steps traced by jax.profiler for the step profiles. Meanwhile the data that planned runs
     generate (a task's `TaskSpec.generated_data`: LRA's ListOps) is written, one process per distinct set.
  2. The runs of --plan (configs/gpu_campaign.txt), in its order, --parallel at a time. A run's NAME is the
     folder its files are committed to under results/ (STUDY/runs/VARIANT/seed_S), and a run committed there
     is not run again. Each line names its own data in its flags: {data} stands for --data (the folder of the
     data sets: multi30k/, tinyshakespeare/), {generated_data} for the set its own config generates in step 1,
     which the run waits for. A run still going at the deadline gets SIGTERM (the trainer saves and exits 75),
     so its metrics.jsonl comes back all the same. The window's own files go to results/gpu_windows/.
A second command on the same (still warm) machine with the same --work goes on where the first stopped: generated
data is kept (the generator keeps a set from the same settings), a benchmark or run that ended there is reported,
not run again, and a run stopped at the deadline resumes from its checkpoint. Generating LRA's ListOps takes about
280 s on the H100 machine's CPU (2026-11-28), so the first ListOps run waits for it unless the benchmarks fill that
time.
What comes back fits the device tool's limit (8 files, 16 MiB each): OUT/summary.json, OUT/summary.md,
OUT/runs.tar.gz (each run's results.json, metrics.jsonl, config.json and train.log), OUT/benchmarks.tar.gz
(figures and logs) and OUT/traces_BENCHMARK.tar.gz, all rewritten after every step, so that a command killed at its
limit still returns what had finished. It exits 1, naming them, if a benchmark or run failed or timed out. With
--tiny the benchmarks run at CPU sizes (configs/gpu_benchmarks.py:tiny) in a minute or two; the test suite runs that
with a plan of tiny runs, so that the campaign cannot rot before a GPU is at hand.
"""
import argparse
import dataclasses
import functools
import hashlib
import itertools
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence

from absl import flags as absl_flags

from lra_posenc.config_files import config_of_flags, load_config
from lra_posenc.data.files import DataError, written_whole
from lra_posenc.tasks import TASKS
from lra_posenc.training.cli import user_error_message
from lra_posenc.training.run_files import (CONFIG_FILE, HISTORY_FILE, RESULTS_FILE, TRAIN_LOG, read_history,
                                           read_json, read_json_if_present, write_json)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAN = os.path.join(ROOT, 'configs', 'gpu_campaign.txt')
BENCHMARKS = os.path.join(ROOT, 'configs', 'gpu_benchmarks.py')
COMMITTED = os.path.join(ROOT, 'results')
RUN_FILES = (RESULTS_FILE, HISTORY_FILE, CONFIG_FILE, TRAIN_LOG)
ENVIRONMENT_SETTING = re.compile(r'[A-Z][A-Z0-9_]*=.*')  # A plan line's VARIABLE=VALUE, before its flags.
MAX_FILE_BYTES = 16 * 2**20  # The device tool returns no larger file.


def benchmarks(tiny: bool, peer_models: str, figures: str, traces: str) -> dict[str, tuple[list[str], float]]:
  """configs/gpu_benchmarks.py's commands by name, filled in, with the seconds each may take; `figures` and
  `traces` hold {name}, which becomes the benchmark's."""
  fill = lambda word, name: (word.replace('{peer_models}', peer_models)
                             .replace('{figures}', figures.replace('{name}', name))
                             .replace('{traces}', traces.replace('{name}', name)))
  return {name: ([sys.executable, *(fill(word, name) for word in benchmark['command'])], benchmark['seconds'])
          for name, benchmark in load_config(BENCHMARKS, 'tiny' if tiny else None).items()}


# What a plan's flags may name, replaced when a run starts: the --data folder, and the data set the run's own
# config generates (its task's `TaskSpec.generated_data`), which the campaign writes.
DATA, GENERATED_DATA = '{data}', '{generated_data}'


@dataclasses.dataclass(frozen=True)
class PlannedRun:
  """One line of the plan: a name, a task, its process's environment settings, and the training command's flags."""
  name: str
  task: str
  flags: tuple[str, ...]
  env: tuple[tuple[str, str], ...] = ()

  @property
  def needs_generated_data(self) -> bool:
    return any(GENERATED_DATA in flag for flag in self.flags)

  def command_flags(self, data: str, generated_data: str) -> list[str]:
    return [flag.replace(DATA, data).replace(GENERATED_DATA, generated_data) for flag in self.flags]


def read_plan(path: str) -> list[PlannedRun]:
  """The plan's runs, in its order: `NAME TASK [VARIABLE=VALUE...] FLAGS...` per line, NAME a relative folder
  (where the run is committed), the settings before the flags going into the run's environment
  (`JAX_DEFAULT_MATMUL_PRECISION=highest`), the flags naming their data with {data} or, for a task that generates
  its data, {generated_data}; '#' starts a comment."""
  runs, names = [], set()
  with open(path) as f:
    for number, line in enumerate(f, start=1):
      words = shlex.split(line, comments=True)
      if not words:
        continue
      settings = list(itertools.takewhile(ENVIRONMENT_SETTING.fullmatch, words[2:]))
      if len(words) < 3 + len(settings) or words[1] not in TASKS:
        raise DataError(path, number,
                        f'expected NAME TASK [VARIABLE=VALUE...] FLAGS... with TASK one of {sorted(TASKS)}')
      name = words[0]
      if os.path.isabs(name) or os.path.normpath(name) != name or name.split('/')[0] == '..':
        raise DataError(path, number, f'run name {name!r}: a relative folder such as STUDY/runs/VARIANT/seed_S')
      if name in names:
        raise DataError(path, number, f'run {name!r} is planned twice')
      flags = words[2 + len(settings):]
      named = {field for flag in flags for field in re.findall(r'\{[^}]*\}', flag)}
      if unknown := sorted(named - {DATA, GENERATED_DATA}):
        raise DataError(path, number, f'{", ".join(unknown)}: a flag may name only {DATA} and {GENERATED_DATA}')
      if any(GENERATED_DATA in flag for flag in flags) and TASKS[words[1]].generated_data is None:
        raise DataError(path, number, f'{GENERATED_DATA}: task {words[1]!r} generates no data; name its files '
                                      f'with {DATA}')
      names.add(name)
      runs.append(PlannedRun(name, words[1], tuple(flags),
                             tuple(tuple(setting.split('=', 1)) for setting in settings)))
  return runs


class Campaign:
  """The work folder, the deadline and the summary; `pack` copies what is done to --out."""

  def __init__(self, out: str, work: str, budget_seconds: float):
    self.out, self.work = out, work
    self.deadline = time.monotonic() + budget_seconds
    self.summary = {'started': time.strftime('%Y-%m-%dT%H:%M:%S%z'), 'budget_seconds': budget_seconds,
                    'benchmarks': {}, 'runs': {}}
    for folder in ('benchmarks', 'logs', 'runs', 'traces'):
      os.makedirs(os.path.join(work, folder), exist_ok=True)

  def seconds_left(self) -> float:
    return self.deadline - time.monotonic()

  def pack(self) -> None:
    """summary.json and .md, and one archive per folder, each left out (and said so) above the tool's limit."""
    traced = sorted(os.listdir(os.path.join(self.work, 'traces')))
    archives = {'benchmarks.tar.gz': ('benchmarks', 'logs'), 'runs.tar.gz': ('runs',)} | {
        f'traces_{name}.tar.gz': (os.path.join('traces', name),) for name in traced}
    self.summary['left_out'] = []
    for archive, folders in archives.items():
      path = os.path.join(self.out, archive)
      with tarfile.open(path + '.tmp', 'w:gz') as tar:
        for folder in folders:
          tar.add(os.path.join(self.work, folder), arcname=folder,
                  filter=functools.partial(_returned, run_names=set(self.summary['runs'])))
      if os.path.getsize(path + '.tmp') > MAX_FILE_BYTES:
        kept = ', its last smaller version kept' if os.path.exists(path) else ''
        self.summary['left_out'].append(f'{archive}: {os.path.getsize(path + ".tmp")} bytes{kept}')
        os.remove(path + '.tmp')
      else:
        os.replace(path + '.tmp', path)
    write_json(os.path.join(self.out, 'summary.json'), self.summary, sort_keys=False)
    with written_whole(os.path.join(self.out, 'summary.md')) as f:
      f.write(markdown(self.summary))


def _returned(member: tarfile.TarInfo, run_names: set[str]) -> tarfile.TarInfo | None:
  """Under runs/, the folders leading to each run's and, in those, only RUN_FILES; elsewhere everything."""
  if not member.name.startswith('runs/'):
    return member
  path = member.name.removeprefix('runs/')
  if member.isdir():
    return member if any(name == path or name.startswith(path + '/') for name in run_names) else None
  return member if os.path.dirname(path) in run_names and os.path.basename(path) in RUN_FILES else None


def run_command(name: str, command: list[str], timeout: float, log_path: str) -> dict:
  """Runs `command` from the repository root, its output to `log_path`; returns its status and time."""
  print(f'[{name}] {shlex.join(command)}', flush=True)
  start = time.perf_counter()
  with open(log_path, 'w') as log:
    try:
      returncode = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=max(timeout, 1),
                                  env=os.environ | {'PYTHONUNBUFFERED': '1'}).returncode
    except subprocess.TimeoutExpired:
      returncode = None
  seconds = time.perf_counter() - start
  status = 'ok' if returncode == 0 else ('timed out' if returncode is None else f'failed ({returncode})')
  print(f'[{name}] {status} in {seconds:.0f} s', flush=True)
  with open(log_path) as log:
    return {'command': command, 'status': status, 'seconds': seconds, 'output_tail': log.read()[-1500:]}


def run_benchmarks(campaign: Campaign, names: Sequence[str], tiny: bool, peer_models: str) -> None:
  """Runs each benchmark of `names` in turn; one that ended in an earlier command in this work folder, however
  it ended, is reported again, not run: a second command's time goes to the runs."""
  figures_of = lambda name: os.path.join(campaign.work, 'benchmarks', f'{name}.json')
  commands = benchmarks(tiny, peer_models, figures_of('{name}'), os.path.join(campaign.work, 'traces', '{name}'))
  for name in names:
    command, allowed = commands[name]
    figures = figures_of(name)
    record = os.path.join(campaign.work, 'benchmarks', f'{name}.step.json')
    if (earlier := read_json_if_present(record)) is not None:
      campaign.summary['benchmarks'][name] = earlier | {'status': f'{earlier["status"]}, in an earlier command'}
      print(f'[{name}] {earlier["status"]} in an earlier command', flush=True)
      continue
    step = run_command(name, command, min(allowed, campaign.seconds_left()),
                       os.path.join(campaign.work, 'logs', f'{name}.log'))
    if step['status'] == 'ok' and os.path.exists(figures):
      step['figures'] = benchmark_figures(read_json(figures))
    write_json(record, step, sort_keys=False)
    campaign.summary['benchmarks'][name] = step
    campaign.pack()


def benchmark_figures(measured: dict) -> dict:
  """What a reader compares across windows: per encoding steps/s, MFU, compile seconds, memory, attention path;
  the side-by-side's ms per step and ratio."""
  if 'ratio_ours_to_peer' in measured:
    return {key: measured[key] for key in ('shape', 'ms_per_step', 'ratio_ours_to_peer', 'model_gflops_per_second')}
  return {name: {'steps_per_second': run['train']['steps_per_second'], 'mfu': run['train']['mfu'],
                 'compile_seconds': run['train']['compile_seconds'],
                 'compiled_gib': run['train']['compiled_bytes_per_device'] / 2**30,
                 'attention': {call: path['implementation'] + (f" ({path['reason']})" if path['reason'] else '')
                               for call, path in run['attention'].items()}}
          for name, run in measured['encodings'].items()}


def data_sets(plan: Sequence[PlannedRun], work: str, data: str) -> dict[str, tuple[str, list[str]]]:
  """For each run of `plan` naming {generated_data}: the folder its config's data is written to and the command
  that writes it ({data} standing for `data`). Runs whose configs generate the same set share one folder, named
  by the command, so that a second campaign command in `work` finds it again. Raises ValueError naming a run
  whose flags give no config."""
  sets = {}
  for run in plan:
    if run.needs_generated_data:
      flags = [re.sub(r'^--config=(?!/)', f'--config={ROOT}/', flag) for flag in run.command_flags(data, '')]
      try:
        config = config_of_flags(flags)
      except (AttributeError, KeyError, OSError, absl_flags.Error) as error:  # As its trainer's flags would fail.
        raise ValueError(f'run {run.name}: {user_error_message(error, flags, parsing=True)}') from None
      recipe = TASKS[run.task].generated_data(config, GENERATED_DATA)
      key = hashlib.sha256(json.dumps([run.task, recipe]).encode()).hexdigest()[:12]
      folder = os.path.join(work, 'generated_data', f'{run.task}_{key}')
      sets[run.name] = (folder, [sys.executable, *(word.replace(GENERATED_DATA, folder) for word in recipe)])
  return sets


def generate_data(sets: dict[str, tuple[str, list[str]]]) -> dict[str, subprocess.Popen]:
  """Starts writing each distinct set of `data_sets`, one process each (on one CPU core, without jax); by folder."""
  writing = {}
  for folder, command in dict(sets.values()).items():
    print(f'[generated data] {shlex.join(command)}', flush=True)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, 'generate.log'), 'w') as log:
      writing[folder] = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
  return writing


def pending_runs(campaign: Campaign, plan: Sequence[PlannedRun], committed: str) -> list[PlannedRun]:
  """The runs of `plan` not committed under `committed` and not finished in an earlier command in this work
  folder (reported again in the summary)."""
  pending = [run for run in plan if not os.path.exists(os.path.join(committed, run.name, RESULTS_FILE))]
  campaign.summary['skipped_as_committed'] = [run.name for run in plan if run not in pending]
  for run in list(pending):
    workdir = os.path.join(campaign.work, 'runs', run.name)
    if os.path.exists(os.path.join(workdir, RESULTS_FILE)):
      pending.remove(run)
      campaign.summary['runs'][run.name] = {'status': 'finished in an earlier command', 'beside': '-'} | run_figures(
          workdir)
  return pending


def run_plan(campaign: Campaign, pending: list[PlannedRun], sets: dict[str, tuple[str, list[str]]],
             writing: dict[str, subprocess.Popen], *, data: str, parallel: int, least_seconds: float,
             grace_seconds: float) -> None:
  """Starts the `pending` runs in order while --least_seconds remain, at most `parallel` at once, each naming
  generated data once its set (`sets`, being written by `writing`) is written; stops them all (SIGTERM, then
  SIGKILL after `grace_seconds`) `grace_seconds` before the deadline."""
  running: dict[str, tuple[subprocess.Popen, float]] = {}
  signalled: set[str] = set()
  env = os.environ | {'XLA_PYTHON_CLIENT_MEM_FRACTION': f'{0.9 / parallel:.2f}', 'PYTHONUNBUFFERED': '1'}
  try:
    while pending or running:
      # A run waits for its generated data without blocking this loop, which signals and kills at the deadline.
      folder = sets[pending[0].name][0] if pending and pending[0].needs_generated_data else None
      ready = bool(pending) and (folder is None or writing[folder].poll() is not None)
      if ready and len(running) < parallel and campaign.seconds_left() >= least_seconds:
        run = pending.pop(0)
        if folder is not None and writing[folder].returncode != 0:  # Its runs fail; the others go on.
          campaign.summary['runs'][run.name] = {'status': f'failed (generating its data: {folder}/generate.log)',
                                                'beside': '-'}
          print(f'[{run.name}] {campaign.summary["runs"][run.name]["status"]}', flush=True)
          continue
        workdir = os.path.join(campaign.work, 'runs', run.name)
        os.makedirs(workdir, exist_ok=True)
        command = [sys.executable, '-m', TASKS[run.task].module, f'--workdir={workdir}',
                   *run.command_flags(data, folder or ''),
                   f'--compilation_cache_dir={os.path.join(campaign.work, "compilation_cache")}']
        print(f'[{run.name}] {shlex.join(command)}', flush=True)
        with open(os.path.join(workdir, TRAIN_LOG), 'a') as log:  # A resumed run's log goes on.
          process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env | dict(run.env))
        running[run.name] = (process, time.perf_counter())
        campaign.summary['runs'][run.name] = {'command': command, 'env': dict(run.env), 'status': 'running',
                                              'beside': len(running) - 1}
        continue
      if not running and campaign.seconds_left() < least_seconds:
        break
      time.sleep(1)
      if campaign.seconds_left() < grace_seconds:
        for name, (process, _) in running.items():
          if name not in signalled:  # Once: a second SIGTERM would kill a run that is saving, or exiting.
            process.send_signal(signal.SIGTERM)
            signalled.add(name)
      for name, (process, start) in list(running.items()):
        returncode = process.poll()
        killed = returncode is None and campaign.seconds_left() < 0
        if killed:
          process.kill()
          returncode = process.wait()
        if returncode is not None:
          del running[name]
          campaign.summary['runs'][name] |= {'status': 'killed at the deadline' if killed else exit_status(returncode),
                                             'seconds': time.perf_counter() - start} | run_figures(
              os.path.join(campaign.work, 'runs', name))
          print(f'[{name}] {campaign.summary["runs"][name]["status"]} in '
                f'{campaign.summary["runs"][name]["seconds"]:.0f} s', flush=True)
          campaign.pack()
  finally:  # An error here must not leave trainings holding the device.
    for process, _ in running.values():
      process.kill()
      process.wait()
  campaign.summary['not_started'] = [run.name for run in pending]


def exit_status(returncode: int) -> str:
  return {0: 'finished', 75: 'stopped at the deadline',  # 75: the trainer saved and exited.
          -signal.SIGTERM: 'stopped at the deadline before it could save'}.get(returncode, f'failed ({returncode})')


def failures(summary: dict) -> list[str]:
  """The benchmarks and runs that failed or timed out, here or in an earlier command (a run stopped at the
  deadline has not failed): the exit status says so, beside the summary that holds them."""
  return [name for part in ('benchmarks', 'runs') for name, step in summary[part].items()
          if step['status'].startswith(('failed', 'timed out'))]


def run_figures(workdir: str) -> dict:
  """A run's headline numbers, from its results.json or else from its metrics.jsonl (whose last line a run
  killed at the deadline may have cut short)."""
  figures = {}
  results = read_json_if_present(os.path.join(workdir, RESULTS_FILE))
  if results is not None:
    figures |= {'step': results['step'], 'best_step': results['best_step'],
                'test': {k: v for k, v in results['test'].items() if isinstance(v, (int, float))},
                'train_seconds': results['train_seconds_this_run'],
                'compile_seconds': results['runs'][-1].get('compile_seconds'), 'attention': results['attention']}
  train, validation = (read_history(workdir, prefix) for prefix in ('train', 'validation'))
  if train or validation:
    rates = [record['steps_per_second'] for record in train if 'steps_per_second' in record]
    figures |= {'median_steps_per_second': statistics.median(rates) if rates else None,
                'last_train_step': train[-1]['step'] if train else 0,
                'last_validation': validation[-1] if validation else None}
  return figures


def devices() -> dict:
  """The backend and its devices, asked in a process of its own: jax in this one would hold most of the GPU's
  memory (XLA preallocates on first use) for the campaign's whole length."""
  query = ('import json, jax; print(json.dumps({"jax": jax.__version__, "backend": jax.default_backend(), '
           '"default_matmul_precision": str(jax.config.jax_default_matmul_precision), "devices": [{"platform": '
           'd.platform, "device_kind": d.device_kind} for d in jax.devices()]}))')
  answer = subprocess.run([sys.executable, '-c', query], capture_output=True, text=True)
  if answer.returncode:
    raise RuntimeError(f'asking jax for its devices failed ({answer.returncode}):\n{answer.stderr}')
  return json.loads(answer.stdout.splitlines()[-1])


def markdown(summary: dict) -> str:
  """The summary as a reader wants it: one line per benchmark and encoding, one per run."""
  lines = [f'# GPU campaign, {summary["started"]}', '']
  if 'devices' in summary:
    kinds = ', '.join(sorted({d['device_kind'] for d in summary['devices']}))
    lines += [f'jax {summary["jax"]}, {len(summary["devices"])} x {kinds}; default matmul precision '
              f'{summary["default_matmul_precision"]}', '']
  lines += ['| benchmark | encoding | status | steps/s | MFU | compile s | attention |', '| --- | --- | --- | --- | '
            '--- | --- | --- |']
  for name, step in summary['benchmarks'].items():
    figures = step.get('figures') or {}
    if 'ratio_ours_to_peer' in figures:
      lines.append(f'| {name} | - | {step["status"]} | ms/step {figures["ms_per_step"]} | | | ratio ours/peer '
                   f'{figures["ratio_ours_to_peer"]:.3f} |')
      continue
    for encoding, fig in figures.items():
      mfu = '-' if fig['mfu'] is None else f'{fig["mfu"]:.1%}'
      paths = '; '.join(f'{call}: {path}' for call, path in fig['attention'].items())
      lines.append(f'| {name} | {encoding} | {step["status"]} | {fig["steps_per_second"]:.2f} | {mfu} | '
                   f'{fig["compile_seconds"]:.1f} | {paths} |')
    if not figures:
      lines.append(f'| {name} | - | {step["status"]} ({step["seconds"]:.0f} s) | | | | |')
  lines += ['', '| run | status | seconds | steps | median steps/s | test | beside |', '| --- | --- | --- | --- | --- '
            '| --- | --- |']
  for name, run in summary['runs'].items():
    test = ', '.join(f'{k} {v:.4f}' for k, v in sorted(run.get('test', {}).items()))
    rate = run.get('median_steps_per_second')
    lines.append(f'| {name} | {run["status"]} | {run.get("seconds", 0):.0f} | {run.get("last_train_step", "-")} | '
                 f'{"-" if rate is None else f"{rate:.2f}"} | {test} | {run["beside"]} |')
  for key in ('skipped_as_committed', 'not_started', 'left_out'):
    if summary.get(key):
      lines += ['', f'{key.replace("_", " ")}: {", ".join(summary[key])}']
  return '\n'.join(lines) + '\n'


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--out', required=True, help='Where summary.json, summary.md and the archives go.')
  parser.add_argument('--work', default='', help='Work folder (runs, data, traces); default OUT/../campaign_work.')
  parser.add_argument('--budget_seconds', type=float, default=540, help='Everything ends by then.')
  parser.add_argument('--benchmarks', default='lra,tiny,side_by_side,attention',
                      help=f'Comma-separated, in order, names in {BENCHMARKS}; empty: none.')
  parser.add_argument('--plan', default=PLAN, help='The runs, one per line: NAME TASK [VARIABLE=VALUE...] FLAGS...')
  parser.add_argument('--committed', default=COMMITTED, help='Runs with NAME/results.json here are not run again.')
  parser.add_argument('--parallel', type=int, default=1,
                      help='Runs sharing the GPU at once. One LRA run alone kept an H100 ~25%% busy in MFU terms '
                           '(2026-11-28); two may both miss the deadline.')
  parser.add_argument('--least_seconds', type=float, default=150, help='No run starts with less time left.')
  parser.add_argument('--grace_seconds', type=float, default=25, help='Stop runs this long before the deadline.')
  parser.add_argument('--data', default=os.path.join(ROOT, '..', 'shared', 'data'),
                      help='The data sets (multi30k/, tinyshakespeare/): what {data} in the plan stands for.')
  parser.add_argument('--peer_models', default='/tmp/wmt_models.py', help="Flax's examples/wmt/models.py.")
  parser.add_argument('--tiny', action='store_true', help='Benchmarks at CPU sizes: what the test suite runs.')
  args = parser.parse_args()
  names = [n for n in args.benchmarks.split(',') if n]
  known = benchmarks(args.tiny, args.peer_models, '', '')
  if unknown := sorted(set(names) - set(known)):
    parser.error(f'--benchmarks: {", ".join(unknown)} not among {", ".join(known)} ({BENCHMARKS})')
  work = args.work or os.path.join(os.path.dirname(os.path.abspath(args.out)), 'campaign_work')
  try:  # Every line checked, its config read, before anything starts.
    plan = read_plan(args.plan)
    sets = data_sets(plan, work, os.path.abspath(args.data))
  except ValueError as error:
    parser.error(str(error))
  os.makedirs(args.out, exist_ok=True)
  campaign = Campaign(args.out, work, args.budget_seconds)
  campaign.summary |= devices()
  print(json.dumps({k: campaign.summary[k] for k in ('jax', 'backend', 'devices')}), flush=True)
  pending = pending_runs(campaign, plan, args.committed)
  writing = generate_data({run.name: sets[run.name] for run in pending if run.name in sets})
  try:
    run_benchmarks(campaign, names, args.tiny, args.peer_models)
    run_plan(campaign, pending, sets, writing, data=os.path.abspath(args.data), parallel=args.parallel,
             least_seconds=args.least_seconds, grace_seconds=args.grace_seconds)
  finally:
    for process in writing.values():
      process.kill()
    campaign.pack()
  print(markdown(campaign.summary), flush=True)
  if failed := failures(campaign.summary):
    sys.exit(f'failed: {", ".join(failed)}; their output is in summary.md and the logs in {args.out}')


if __name__ == '__main__':
  main()
