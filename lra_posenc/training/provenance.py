"""Where a result came from: when, which code, which packages, which devices and processes."""
import datetime
import importlib.metadata
import os
import subprocess

import jax

PACKAGES = ('jax', 'jaxlib', 'flax', 'optax', 'orbax-checkpoint', 'chex', 'numpy')
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def provenance() -> dict:
  """The record results.json keeps beside the scores, so a figure can be traced to its code and machine.

  `git_commit` and `git_dirty` (whether tracked files differed from that commit) are None
  outside a git checkout; a package without installed metadata has version None.
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
  }


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
