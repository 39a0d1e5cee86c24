"""A/B in one process: the projections' products with their gradients as `models.dense.dense_dot_general` writes
them (the kernel's gradient as inputs^T . gradient) against JAX's own (`lax.dot_general`), as before 94849e3. Times
the trainer's train step (`TrainStepTimer`) in interleaved windows and prints each side's median ms a step, their
ratio (dense / JAX's) and the first step's loss (equal on both sides). From the repository root:

    .venv/bin/python benchmarks/dense_products_ab.py configs/lm/shakespeare_char.py:cpu data.text_file=unused \\
        --output=lm_cpu.json
    .venv/bin/python benchmarks/dense_products_ab.py configs/listops/lra.py:cpu --output=listops_cpu.json
    .venv/bin/python benchmarks/dense_products_ab.py side_by_side_wmt --output=wmt_default_d0.json

`side_by_side_wmt` is scripts/side_by_side_wmt.py's default shape without dropout. Backs PERFORMANCE.md's log entry
"2026-12-02, the projections' kernel gradients as inputs^T . gradient" (94849e3) and the LM section "After the
projections' gradients became plain products" (the records are in results/performance/dense_products_2026-12-02/).
"""
import argparse
import importlib.util
import json
import os
import statistics

import jax
from jax import lax

from lra_posenc.config_files import config_of_flags
from lra_posenc.models import attention, transformer
from lra_posenc.studies import benchmark
from lra_posenc.tasks import TASKS
from lra_posenc.training import run_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DENSE = transformer.dense_dot_general


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('config', help="CONFIG[:ARG], or 'side_by_side_wmt' (scripts/side_by_side_wmt.py's default "
                      'shape, dropout 0).')
  parser.add_argument('overrides', nargs='*', metavar='KEY=VALUE', help='Config overrides (as --config.KEY=VALUE).')
  parser.add_argument('--output', required=True, help='Write the figures to this JSON file.')
  parser.add_argument('--windows', type=int, default=8, help='Timed windows per side.')
  parser.add_argument('--steps_per_window', type=int, default=5)
  return parser.parse_args(argv)


def read_config(spec: str, overrides: list[str]):
  """The config to time: a config file with overrides, or side_by_side_wmt.py's default shape without dropout."""
  if spec != 'side_by_side_wmt':
    return config_of_flags([f'--config={spec}', *(f'--config.{item}' for item in overrides)])
  loader = importlib.util.spec_from_file_location('side_by_side_wmt', os.path.join(ROOT, 'scripts',
                                                                                     'side_by_side_wmt.py'))
  module = importlib.util.module_from_spec(loader)
  loader.loader.exec_module(module)
  return module.our_config(argparse.Namespace(layers=3, dim=256, heads=4, mlp=1024, batch=32, length=32, vocab=8000,
                                              dropout=0.0, dtype='float32', encoding='sinusoidal'))


def build(config, dot_general) -> benchmark.TrainStepTimer:
  """The train step compiled with `dot_general` as every projection's product (set only while it compiles)."""
  transformer.dense_dot_general = attention.dense_dot_general = dot_general
  try:
    return benchmark.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
  finally:
    transformer.dense_dot_general = attention.dense_dot_general = DENSE


def main(argv: list[str] | None = None) -> dict:
  args = parse_args(argv)
  config = read_config(args.config, args.overrides)
  timers = benchmark.built_timers({'dense_products': lambda: build(config, DENSE),
                                   'jax_gradients': lambda: build(config, lax.dot_general)},
                                  report=benchmark.print_now)
  seconds = benchmark.interleaved_windows(timers, windows=args.windows, steps_per_window=args.steps_per_window)
  ms = {name: 1e3 * statistics.median(s) / args.steps_per_window for name, s in seconds.items()}
  result = {'config': args.config, 'sets': args.overrides,
            'first_step_loss': {name: t.first_step_loss for name, t in timers.items()}, 'ms_per_step': ms,
            'ratio': ms['dense_products'] / ms['jax_gradients'], 'cpu': run_files.host_cpu(), 'jax': jax.__version__,
            'xla_flags': os.environ.get('XLA_FLAGS', ''), 'windows_seconds': seconds}
  print(json.dumps({k: v for k, v in result.items() if k != 'windows_seconds'}, indent=1))
  with open(args.output, 'w') as f:
    json.dump(result, f, indent=1)
  return result


if __name__ == '__main__':
  main()
