"""What a run writes: its workdir, checked before training; its JSON files, each written whole or not at all; its
scalars, to the log, to TensorBoard event files (tensorboardX, no TensorFlow) and to metrics.jsonl; and where a
result came from (provenance: when, which code, which packages, which devices, processes and host CPU).

metrics.jsonl holds one JSON object per write ({"step", "prefix", scalars...}) so that
sweeps and plots read training curves without a TensorBoard reader. A run resumed from a
checkpoint at step S drops the records after S (the resumed run writes them again: resume
is exact, though a first train record after an S between log steps averages the steps since
S alone) and the 'final' records, so a resumed run's history reads as an uninterrupted one's;
TensorBoard is told likewise to purge steps after S.
`read_history` keeps the last record per (prefix, step).
"""
import contextlib
import datetime
import fcntl
import importlib.metadata
import json
import logging as std_logging
import os
import platform
import shutil
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
from absl import logging
from tensorboardX import SummaryWriter

from lra_posenc.data.files import written_whole
from lra_posenc.training import distributed

CONFIG_FILE = 'config.json'  # The config the run trained with, as plain JSON.
RESULTS_FILE = 'results.json'  # Written when training ends: the scores and how the run ended.
TRAIN_LOG = 'train.log'  # The training process's output, where a sweep or the GPU campaign starts it.


def prepare_workdir(workdir: str) -> None:
  """Creates `workdir` and writes to it, so an unusable one fails now, naming itself, not hours later."""
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, f'.write_probe_{socket.gethostname()}_{os.getpid()}')
    with open(probe, 'w') as f:
      f.write('ok')
    os.remove(probe)
  except OSError as error:
    raise OSError(f'workdir {workdir!r} is not writable: {error}') from None


def check_free_space(workdir: str, state: Any, max_to_keep: int, evaluated_to_keep: int, held: int) -> None:
  """Fails unless the disk holds the kept checkpoints, the best one, one being written and the kept evaluated
  parameters, less the `held` bytes the workdir's checkpoints take already (a resumed run replaces them)."""
  nbytes = lambda tree: sum(jnp.asarray(x).nbytes for x in jax.tree.leaves(tree))
  needed = (max_to_keep + 2) * nbytes(state) + evaluated_to_keep * nbytes(state.params) - held
  free = shutil.disk_usage(workdir).free
  if free < needed:
    raise OSError(f'workdir {workdir!r} has {free / 2**20:.1f} MiB free, but {max_to_keep} latest checkpoints, '
                  f'the best one, one being written and {evaluated_to_keep} evaluated parameter sets need about '
                  f'{needed / 2**20:.1f} MiB more than the {held / 2**20:.1f} MiB its checkpoints hold')


def write_run_files(workdir: str, config: dict[str, Any], artifacts: dict[str, Any], step: int) -> None:
  """What a workdir says about its run before training from `step`: the config and the task's artifacts.

  A results.json there is a finished run's that now trains on (more steps, or more patience): it becomes
  results.step_STEP.json, so that no results.json stands for a run still training, and none is lost. A
  config.json that differs (a resume may change training settings) becomes config.step_STEP.json, the config
  that trained the steps up to STEP, unless one is there already (the later one trained no kept step).
  """
  write_json(os.path.join(workdir, 'artifacts.json'), artifacts)
  config_path, earlier_path = os.path.join(workdir, CONFIG_FILE), os.path.join(workdir, f'config.step_{step}.json')
  earlier = read_json_if_present(config_path)
  if earlier is not None and earlier != json.loads(json.dumps(config)) and not os.path.exists(earlier_path):
    os.replace(config_path, earlier_path)
  write_json(config_path, config)
  results = os.path.join(workdir, RESULTS_FILE)
  if os.path.exists(results):
    os.replace(results, os.path.join(workdir, f'results.step_{step}.json'))


def read_json(path: str) -> dict:
  with open(path) as f:
    return json.load(f)


def read_json_if_present(path: str) -> dict | None:
  """The JSON file at `path`, or None where a run has not written it."""
  return read_json(path) if os.path.exists(path) else None


def write_json(path: str, payload: dict, *, sort_keys: bool = True, compact: bool = False) -> None:
  """`payload` as `path`, whole or not at all (a reader never sees a half-written file, and writers never share
  a temporary file); keys sorted, for stable diffs, unless their order carries meaning; `compact` (no spaces,
  one line) for large records."""
  with written_whole(path) as f:
    if compact:
      json.dump(payload, f, separators=(',', ':'), sort_keys=sort_keys)
    else:
      json.dump(payload, f, indent=2, sort_keys=sort_keys)


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
  """Holds an exclusive lock on PATH.lock, for a read-modify-write of `path` that other processes may be
  making at the same time."""
  with open(path + '.lock', 'a') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)


HISTORY_FILE = 'metrics.jsonl'


class MetricWriter:
  """Writes from the first host only; the others hold the same reduced values."""

  def __init__(self, workdir: str, resume_step: int = 0):
    self._events = self._history = None
    if distributed.is_primary():
      self._events = SummaryWriter(os.path.join(workdir, 'tensorboard'), purge_step=resume_step + 1)
      path = os.path.join(workdir, HISTORY_FILE)
      if os.path.exists(path):
        _keep_history_up_to(path, resume_step)
      self._history = open(path, 'a', encoding='utf-8')

  def write(self, step: int, scalars: dict[str, float], *, prefix: str) -> None:
    if self._events is None:
      return
    logging.info('[%d] %s: %s', step, prefix, ', '.join(f'{k}={_format(v)}' for k, v in scalars.items()))
    for key, value in scalars.items():
      self._events.add_scalar(f'{prefix}/{key}', value, step)
    self._events.flush()
    self._history.write(json.dumps({'step': step, 'prefix': prefix} | scalars, sort_keys=True) + '\n')
    self._history.flush()

  def __enter__(self) -> 'MetricWriter':
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def close(self) -> None:
    if self._events is not None:
      self._events.close()
      self._history.close()


def read_history(workdir: str, prefix: str) -> list[dict]:
  """The records written under `prefix`, one per step (the latest write wins), sorted by step."""
  path = os.path.join(workdir, HISTORY_FILE)
  records = {}
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      for line in f:
        try:
          record = json.loads(line)
        except json.JSONDecodeError:  # Blank, or cut short by a killed run; its step is written again on resume.
          continue
        if record['prefix'] == prefix:
          records[record['step']] = record
  return [records[step] for step in sorted(records)]


def _keep_history_up_to(path: str, step: int) -> None:
  """Rewrites `path` (atomically) without the records after `step`, the 'final' ones and any cut short."""
  with open(path, encoding='utf-8') as f:
    lines = f.read().splitlines()
  kept = []
  for line in lines:
    try:
      record = json.loads(line)
    except json.JSONDecodeError:  # Blank, or cut short by a killed run.
      continue
    if record['step'] <= step and record['prefix'] != 'final':
      kept.append(line + '\n')
  with written_whole(path, encoding='utf-8') as f:
    f.writelines(kept)


def _format(value: float) -> str:
  return f'{value:.4g}' if isinstance(value, float) else str(value)


def quiet_checkpoint_logs() -> None:
  """Drops Orbax's INFO records (a dozen per save) from the absl log; its warnings stay."""
  std_logging.getLogger('absl').addFilter(
      lambda record: record.levelno >= std_logging.WARNING or '/orbax/' not in record.pathname)


PACKAGES = ('jax', 'jaxlib', 'flax', 'optax', 'orbax-checkpoint', 'chex', 'numpy')
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The vector extensions that set a CPU's float32 and bfloat16 throughput, as /proc/cpuinfo's flags name them.
VECTOR_EXTENSIONS = ('avx2', 'fma', 'avx512f', 'avx512_bf16', 'amx_tile')


def provenance() -> dict:
  """The record results.json keeps beside the scores, so a figure can be traced to its code and machine.

  `git_commit` and `git_dirty` (whether tracked files differed from that commit) are None
  outside a git checkout; a package without installed metadata has version None.
  `default_matmul_precision` is JAX's setting (None: the backend's default, TF32 for float32 on recent
  NVIDIA GPUs), which sets a GPU's float32 results and speed.
  """
  device = jax.devices()[0]
  return {
      'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
      'git_commit': _git('rev-parse', 'HEAD'),
      'git_dirty': _dirty(),
      'packages': {name: _version(name) for name in PACKAGES},
      'devices': {'platform': device.platform, 'kind': device.device_kind, 'count': jax.device_count(),
                  'local_count': jax.local_device_count()},
      'process_count': jax.process_count(),
      'default_matmul_precision': jax.config.jax_default_matmul_precision,
      'host_cpu': host_cpu(),
  }


def host_cpu(cpuinfo_path: str = '/proc/cpuinfo') -> dict:
  """The host CPU that timed a result, and its core count.

  Virtual machines often report a model name alone ("AMD EPYC") for CPUs of different generations and
  speeds, so the family, model number and vector extensions come with it where /proc/cpuinfo gives
  them; elsewhere the model is `platform.processor()`.
  """
  try:
    with open(cpuinfo_path) as f:
      cpu = parse_cpuinfo(f.read())
  except OSError:
    cpu = {}
  return {'model': cpu.pop('model', None) or platform.processor() or platform.machine(), **cpu,
          'cores': os.cpu_count()}


def parse_cpuinfo(text: str) -> dict:
  """The first processor's model name, family, model number and `VECTOR_EXTENSIONS` from /proc/cpuinfo's text."""
  fields = {}
  for line in text.split('\n\n', 1)[0].splitlines():
    key, separator, value = line.partition(':')
    if separator:
      fields.setdefault(key.strip(), value.strip())
  cpu = {'model': fields['model name']} if 'model name' in fields else {}
  for key, name in (('cpu family', 'family'), ('model', 'model_number')):
    if fields.get(key, '').isdigit():
      cpu[name] = int(fields[key])
  if 'flags' in fields:
    flags = set(fields['flags'].split())
    cpu['vector_extensions'] = [name for name in VECTOR_EXTENSIONS if name in flags]
  return cpu


def describe_cpu(cpu: dict) -> str:
  """`host_cpu()` in one line: 'AMD EPYC (family 25, model 1; avx2, fma), 2 cores'."""
  details = ', '.join(f'{name} {cpu[key]}' for key, name in (('family', 'family'), ('model_number', 'model'))
                      if key in cpu)
  if 'vector_extensions' in cpu:
    details += '; ' + (', '.join(cpu['vector_extensions']) or 'none of ' + ', '.join(VECTOR_EXTENSIONS))
  return f"{cpu['model']}{f' ({details})' if details else ''}, {cpu['cores']} cores"


def _version(package: str) -> str | None:
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return None


def _dirty() -> bool | None:
  status = _git('status', '--porcelain', '--untracked-files=no')
  return None if status is None else bool(status)


def _git(*arguments: str) -> str | None:
  try:
    finished = subprocess.run(['git', *arguments], cwd=REPOSITORY, capture_output=True, text=True, timeout=30)
  except (OSError, subprocess.TimeoutExpired):
    return None
  return finished.stdout.strip() if finished.returncode == 0 else None
