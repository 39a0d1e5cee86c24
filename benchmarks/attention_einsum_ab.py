"""A/B in one process: attention on XLA as `models.attention.attend` computes it (the weights formed explicitly,
then an einsum) against `jax.nn.dot_product_attention(implementation='xla')`, as it was computed before af288e5,
where there is no attention dropout. Times the trainer's train step (`TrainStepTimer`) in interleaved windows and
prints each side's median ms a step, their ratio (explicit / jax), the first step's loss and the parameters'
absolute sums after the timed steps (equal up to rounding). From the repository root:

    .venv/bin/python benchmarks/attention_einsum_ab.py configs/lm/shakespeare_char.py:cpu data.text_file=unused \\
        --output=lm_cpu.json
    .venv/bin/python benchmarks/attention_einsum_ab.py configs/listops/lra.py:cpu --output=listops_cpu.json
    .venv/bin/python benchmarks/attention_einsum_ab.py side_by_side_wmt --output=wmt_default_d0.json

`side_by_side_wmt` is scripts/side_by_side_wmt.py's default shape without dropout. Backs PERFORMANCE.md's log entry
"2026-12-03, attention on XLA from explicit weights, not `jax.nn.dot_product_attention`" (af288e5; the records are
in results/performance/attention_einsum_2026-12-03/).
"""
import argparse
import importlib.util
import json
import os
import statistics

import jax
import numpy as np

from lra_posenc.config_files import config_of_flags
from lra_posenc.models import attention
from lra_posenc.studies import benchmark
from lra_posenc.tasks import TASKS
from lra_posenc.training import run_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPLICIT = attention.attend


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


def through_jax(query, key, value, *, bias, key_valid, causal=False, implementation='xla', dropout_rate=0.0,
                dropout_rng=None):
  """`attend` as before af288e5: `jax.nn.dot_product_attention` wherever XLA serves a call without dropout."""
  if implementation != 'xla' or (dropout_rng is not None and dropout_rate > 0.0):
    return EXPLICIT(query, key, value, bias=bias, key_valid=key_valid, causal=causal, implementation=implementation,
                    dropout_rate=dropout_rate, dropout_rng=dropout_rng)
  if bias is not None and bias.shape[0] != query.shape[0]:
    bias = attention.broadcast_over_batch(bias, query.shape[0])
  mask = attention.attention_mask(key_valid, causal=causal, query_length=query.shape[1])
  return jax.nn.dot_product_attention(query, key, value, bias=bias, mask=mask, implementation='xla')


def build(config, attend) -> benchmark.TrainStepTimer:
  """The train step compiled with `attend` in place of the model's (set only while it compiles)."""
  attention.attend = attend
  try:
    return benchmark.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
  finally:
    attention.attend = EXPLICIT


def main(argv: list[str] | None = None) -> dict:
  args = parse_args(argv)
  config = read_config(args.config, args.overrides)
  timers = benchmark.built_timers({'explicit': lambda: build(config, EXPLICIT),
                                   'jax_dot_product_attention': lambda: build(config, through_jax)},
                                  report=benchmark.print_now)
  seconds = benchmark.interleaved_windows(timers, windows=args.windows, steps_per_window=args.steps_per_window)
  ms = {name: 1e3 * statistics.median(s) / args.steps_per_window for name, s in seconds.items()}
  steps = 1 + (args.windows + 1) * args.steps_per_window
  abs_sums = {name: float(sum(np.abs(np.asarray(leaf, np.float64)).sum() for leaf in jax.tree.leaves(t._state.params)))
              for name, t in timers.items()}
  result = {'config': args.config, 'sets': args.overrides,
            'first_step_loss': {name: t.first_step_loss for name, t in timers.items()}, 'ms_per_step': ms,
            'ratio': ms['explicit'] / ms['jax_dot_product_attention'], f'params_abs_sum_after_{steps}_steps': abs_sums,
            'cpu': run_files.host_cpu(), 'jax': jax.__version__, 'xla_flags': os.environ.get('XLA_FLAGS', ''),
            'windows_seconds': seconds}
  print(json.dumps({k: v for k, v in result.items() if k != 'windows_seconds'}, indent=1))
  with open(args.output, 'w') as f:
    json.dump(result, f, indent=1)
  return result


if __name__ == '__main__':
  main()
