"""A/B in one process: the projections' products with their gradients as `models.dense.dense_dot_general` writes
them (the kernel's gradient as inputs^T . gradient) against JAX's own (`lax.dot_general`), as before 94849e3. Times
the trainer's train step (`TrainStepTimer`) in interleaved windows and prints each side's median ms a step, their
ratio (dense / JAX's) and the first step's loss (equal on both sides). From the repository root:

    .venv/bin/python -m benchmarks.dense_products_ab configs/lm/shakespeare_char.py:cpu data.text_file=unused \\
        --output=lm_cpu.json
    .venv/bin/python -m benchmarks.dense_products_ab configs/listops/lra.py:cpu --output=listops_cpu.json
    .venv/bin/python -m benchmarks.dense_products_ab side_by_side_wmt --output=wmt_default_d0.json

`side_by_side_wmt` is scripts/side_by_side_wmt.py's default shape without dropout. Backs PERFORMANCE.md's log entry
"2026-12-02, the projections' kernel gradients as inputs^T . gradient" (94849e3) and the LM section "After the
projections' gradients became plain products" (the records are in results/performance/dense_products_2026-12-02/).
"""
import statistics

from jax import lax

from benchmarks import step_ab
from lra_posenc.models import attention, transformer
from lra_posenc.studies import benchmark
from lra_posenc.tasks import TASKS

DENSE = transformer.dense_dot_general


def build(config, dot_general) -> benchmark.TrainStepTimer:
  """The train step compiled with `dot_general` as every projection's product (set only while it compiles)."""
  transformer.dense_dot_general = attention.dense_dot_general = dot_general
  try:
    return benchmark.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
  finally:
    transformer.dense_dot_general = attention.dense_dot_general = DENSE


def main(argv: list[str] | None = None) -> dict:
  args = step_ab.parse_args(__doc__, argv, windows=8)
  config = step_ab.read_config(args.config, args.overrides)
  timers = benchmark.built_timers({'dense_products': lambda: build(config, DENSE),
                                   'jax_gradients': lambda: build(config, lax.dot_general)},
                                  report=benchmark.print_now)
  seconds = benchmark.interleaved_windows(timers, windows=args.windows, steps_per_window=args.steps_per_window)
  ms = {name: 1e3 * statistics.median(s) / args.steps_per_window for name, s in seconds.items()}
  result = {'config': args.config, 'sets': args.overrides,
            'first_step_loss': {name: t.first_step_loss for name, t in timers.items()}, 'ms_per_step': ms,
            'ratio': ms['dense_products'] / ms['jax_gradients'], 'windows_seconds': seconds}
  return step_ab.write_result(result, args.output)


if __name__ == '__main__':
  main()
