"""XLA's persistent compilation cache: a program is compiled once per machine, not once per process or run.

On an H100 the LRA ListOps train step took 82-190 s to compile in every process; with the cache, seeds,
resumed runs and re-runs of one setting find it on disk.
"""
import hashlib
import os

import jax
from absl import logging

# A compiled CPU program assumes the processor it was built for: its instruction set goes in the key.
CPU_FEATURES_FILE = '/proc/cpuinfo'


def default_directory() -> str:
  """A per-user cache directory ($XDG_CACHE_HOME, else ~/.cache), one folder per jax version and device."""
  root = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
  return os.path.join(root, 'lra_posenc', 'xla', _machine_key())


def _machine_key() -> str:
  device = jax.local_devices()[0]
  key = f'jax-{jax.__version__}_{device.platform}_{device.device_kind}'
  if device.platform == 'cpu' and os.path.exists(CPU_FEATURES_FILE):
    with open(CPU_FEATURES_FILE) as f:
      flags = next((line for line in f if line.startswith('flags')), '')
    key += '_' + hashlib.sha256(flags.encode()).hexdigest()[:12]
  return ''.join(c if c.isalnum() or c in '-_.' else '-' for c in key)


def enable(directory: str) -> None:
  """Caches every compiled program that took a second or more under `directory`; '' turns the cache off, even
  where jax's JAX_COMPILATION_CACHE_DIR variable names one."""
  if not directory:
    jax.config.update('jax_compilation_cache_dir', None)
    logging.info('persistent compilation cache: off')
    return
  os.makedirs(directory, exist_ok=True)
  jax.config.update('jax_compilation_cache_dir', directory)
  logging.info('persistent compilation cache: %s (--compilation_cache_dir= turns it off)', directory)
