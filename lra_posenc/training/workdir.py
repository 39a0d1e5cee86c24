"""A run's workdir: checked before training, and its JSON files, each written whole or not at all."""
import contextlib
import fcntl
import json
import os
import shutil
import socket
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp

from lra_posenc.data.files import written_whole

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
