"""What the train-step A/Bs share: their command line (a config and its overrides, the output, the windows), the
config they time, and how their figures are written."""
import argparse
import importlib.util
import json
import os

import jax
import ml_collections

from lra_posenc.config_files import config_of_flags
from lra_posenc.data.files import written_whole
from lra_posenc.training import run_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDE_BY_SIDE_WMT = 'side_by_side_wmt'  # scripts/side_by_side_wmt.py's default shape, dropout 0.


def parse_args(description: str, argv: list[str] | None, *, windows: int) -> argparse.Namespace:
  """CONFIG[:ARG] (or SIDE_BY_SIDE_WMT), KEY=VALUE overrides, --output, --windows and --steps_per_window."""
  parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('config', help=f"CONFIG[:ARG], or '{SIDE_BY_SIDE_WMT}' (scripts/side_by_side_wmt.py's default "
                      'shape, dropout 0).')
  parser.add_argument('overrides', nargs='*', metavar='KEY=VALUE', help='Config overrides (as --config.KEY=VALUE).')
  parser.add_argument('--output', required=True, help='Write the figures to this JSON file.')
  parser.add_argument('--windows', type=int, default=windows, help='Timed windows per side.')
  parser.add_argument('--steps_per_window', type=int, default=5)
  return parser.parse_args(argv)


def read_config(spec: str, overrides: list[str]) -> ml_collections.ConfigDict:
  """The config to time: a config file with overrides, or side_by_side_wmt.py's default shape without dropout."""
  if spec != SIDE_BY_SIDE_WMT:
    return config_of_flags([f'--config={spec}', *(f'--config.{item}' for item in overrides)])
  loader = importlib.util.spec_from_file_location('side_by_side_wmt', os.path.join(ROOT, 'scripts',
                                                                                     'side_by_side_wmt.py'))
  module = importlib.util.module_from_spec(loader)
  loader.loader.exec_module(module)
  return module.our_config(argparse.Namespace(layers=3, dim=256, heads=4, mlp=1024, batch=32, length=32, vocab=8000,
                                              dropout=0.0, dtype='float32', encoding='sinusoidal'))


def write_result(result: dict, output: str) -> dict:
  """`result` with where it was measured (the host CPU, jax, XLA_FLAGS), printed without its per-window seconds
  and written whole to `output` as JSON; returns it."""
  result = result | {'cpu': run_files.host_cpu(), 'jax': jax.__version__, 'xla_flags': os.environ.get('XLA_FLAGS', '')}
  print(json.dumps({key: value for key, value in result.items() if key != 'windows_seconds'}, indent=1))
  with written_whole(output) as f:
    json.dump(result, f, indent=1)
  return result
