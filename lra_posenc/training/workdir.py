"""A run's workdir: checked before training, and its JSON files, each written whole or not at all."""
import json
import os
import shutil
import socket
from typing import Any

import jax
import jax.numpy as jnp


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


def check_free_space(workdir: str, state: Any, max_to_keep: int) -> None:
  """Fails unless the disk holds the kept checkpoints, the best one and one being written."""
  needed = (max_to_keep + 2) * sum(jnp.asarray(x).nbytes for x in jax.tree.leaves(state))
  free = shutil.disk_usage(workdir).free
  if free < needed:
    raise OSError(f'workdir {workdir!r} has {free / 2**20:.1f} MiB free, but {max_to_keep} latest checkpoints, '
                  f'the best one and one being written need about {needed / 2**20:.1f} MiB')


def write_run_files(workdir: str, config: dict[str, Any], artifacts: dict[str, Any]) -> None:
  """What a workdir says about its run before training: the config and the task's artifacts."""
  write_json(os.path.join(workdir, 'artifacts.json'), artifacts)
  write_json(os.path.join(workdir, 'config.json'), config)


def read_json(path: str) -> dict:
  with open(path) as f:
    return json.load(f)


def write_json(path: str, payload: dict, *, sort_keys: bool = True) -> None:
  """`payload` as `path`, whole or not at all (a reader never sees a half-written file); keys sorted, for
  stable diffs, unless their order carries meaning."""
  temporary = path + '.tmp'
  with open(temporary, 'w') as f:
    json.dump(payload, f, indent=2, sort_keys=sort_keys)
  os.replace(temporary, path)
