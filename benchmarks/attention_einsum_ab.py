"""A/B in one process: attention on XLA as `models.attention.attend` computes it (the weights formed explicitly,
then an einsum) against `jax.nn.dot_product_attention(implementation='xla')`, as it was computed before af288e5,
where there is no attention dropout. Times the trainer's train step (`TrainStepTimer`) in interleaved windows and
prints each side's median ms a step, their ratio (explicit / jax), the first step's loss and the parameters'
absolute sums after the timed steps (equal up to rounding). From the repository root:

    .venv/bin/python -m benchmarks.attention_einsum_ab configs/lm/shakespeare_char.py:cpu data.text_file=unused \\
        --output=lm_cpu.json
    .venv/bin/python -m benchmarks.attention_einsum_ab configs/listops/lra.py:cpu --output=listops_cpu.json
    .venv/bin/python -m benchmarks.attention_einsum_ab side_by_side_wmt --output=wmt_default_d0.json

`side_by_side_wmt` is scripts/side_by_side_wmt.py's default shape without dropout. Backs PERFORMANCE.md's log entry
"2026-12-03, attention on XLA from explicit weights, not `jax.nn.dot_product_attention`" (af288e5; the records are
in results/performance/attention_einsum_2026-12-03/).
"""
import statistics

import jax
import numpy as np

from benchmarks import step_ab
from lra_posenc.models import attention
from lra_posenc.studies import benchmark
from lra_posenc.tasks import TASKS

EXPLICIT = attention.attend


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
  args = step_ab.parse_args(__doc__, argv, windows=8)
  config = step_ab.read_config(args.config, args.overrides)
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
            'windows_seconds': seconds}
  return step_ab.write_result(result, args.output)


if __name__ == '__main__':
  main()
