"""Single float32 matrix products at the language model's `:cpu` step's shapes: XLA:CPU (a jitted `x @ w`, each
call's dispatch from Python included) against PyTorch's `@`, in alternating windows of --repeats products in one
process, the median of --windows each; both with their default threads. Prints per shape each side's microseconds
and GFLOP/s and the ratio XLA / PyTorch. Needs PyTorch (`pip install torch`; not a dependency of the package).
From the repository root, once as is and once without YNNPACK:

    .venv/bin/python -m benchmarks.matmul_xla_vs_torch --output=products_default.json
    XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type= .venv/bin/python -m benchmarks.matmul_xla_vs_torch \\
        --output=products_without_ynnpack.json

Backs PERFORMANCE.md's "Latest: why the 0.90 target against nanoGPT is out of reach with XLA:CPU's products" (the
products alone; the records are in results/performance/lm_products_2026-12-03/).
"""
import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from lra_posenc.training import run_files

# (m, k, n, transposed): a [m, k] @ b [k, n], or b stored as [n, k] and transposed. The step's projections, the
# MLP's two products, a kernel gradient's shape from contiguous operands and the logits.
SHAPES = ((768, 128, 128, False), (768, 128, 512, False), (768, 512, 128, False), (768, 128, 512, True),
          (768, 512, 128, True), (128, 768, 512, False), (512, 768, 128, False), (768, 128, 66, False))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--output', help='Also write the figures to this JSON file.')
  parser.add_argument('--repeats', type=int, default=200, help='Products per window.')
  parser.add_argument('--windows', type=int, default=5, help='Windows per side and shape; the median counts.')
  return parser.parse_args(argv)


def multiply(a, b, transposed: bool):
  return a @ b.T if transposed else a @ b


def sides(a: np.ndarray, b: np.ndarray, transposed: bool, torch) -> dict:
  """One product's two calls: jitted on JAX arrays, and PyTorch's `@` on tensors sharing `a` and `b`'s memory."""
  jitted = jax.jit(multiply, static_argnums=2)
  ja, jb, ta, tb = jnp.asarray(a), jnp.asarray(b), torch.from_numpy(a), torch.from_numpy(b)
  return {'jax': lambda: jitted(ja, jb, transposed), 'torch': lambda: multiply(ta, tb, transposed)}


def window_seconds(product, repeats: int) -> float:
  """Seconds a product took, over `repeats` of them, synchronised at the end."""
  start = time.perf_counter()
  for _ in range(repeats):
    out = product()
  jax.block_until_ready(out)
  return (time.perf_counter() - start) / repeats


def main(argv: list[str] | None = None) -> dict:
  args = parse_args(argv)
  import torch  # Only this benchmark needs it.
  rng = np.random.default_rng(0)
  rows = []
  for m, k, n, transposed in SHAPES:
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if transposed else (k, n), dtype=np.float32)
    products = sides(a, b, transposed, torch)
    for product in products.values():
      jax.block_until_ready(product())
    seconds = {side: [] for side in products}
    for _ in range(args.windows):
      for side, product in products.items():
        seconds[side].append(window_seconds(product, args.repeats))
    j, t = statistics.median(seconds['jax']), statistics.median(seconds['torch'])
    gflop = 2 * m * k * n / 1e9
    rows.append({'m': m, 'k': k, 'n': n, 'transposed_b': transposed, 'jax_us': j * 1e6, 'torch_us': t * 1e6,
                 'jax_gflops': gflop / j, 'torch_gflops': gflop / t})
    print(f'{m}x{k}x{n}{" bT" if transposed else "   "}  jax {j * 1e6:7.1f} us ({gflop / j:6.1f} GFLOP/s)  '
          f'torch {t * 1e6:7.1f} us ({gflop / t:6.1f})  ratio {j / t:.2f}', flush=True)
  result = {'xla_flags': os.environ.get('XLA_FLAGS', ''), 'torch_threads': torch.get_num_threads(),
            'cpu': run_files.host_cpu(), 'jax': jax.__version__, 'torch': torch.__version__, 'rows': rows}
  if args.output:
    with open(args.output, 'w') as f:
      json.dump(result, f, indent=1)
  return result


if __name__ == '__main__':
  main()
