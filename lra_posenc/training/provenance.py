"""Where a result came from: when, which code, which packages, which devices, processes and host CPU."""
import datetime
import importlib.metadata
import os
import platform
import subprocess

import jax

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
