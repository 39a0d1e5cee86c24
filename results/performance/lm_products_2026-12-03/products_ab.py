"""Single float32 matrix products at the LM `:cpu` step's shapes: XLA:CPU (jitted `x @ w`) against PyTorch's
`@`, alternating windows of 200 products in one process, the median of 5 each; 2 threads each.

    [XLA_FLAGS=...] .venv/bin/python results/performance/lm_products_2026-12-03/products_ab.py OUT.json
"""
import json, os, statistics, sys, time
import numpy as np, jax, jax.numpy as jnp, torch
SHAPES = [  # (m, k, n, transpose_b): a [m,k] @ b [k,n] (or b^T stored [n,k])
  (768, 128, 128, False), (768, 128, 512, False), (768, 512, 128, False),
  (768, 128, 512, True), (768, 512, 128, True), (128, 768, 512, False), (512, 768, 128, False), (768, 128, 66, False)]
rng = np.random.default_rng(0)
rows = []
for m, k, n, tb in SHAPES:
  a = rng.standard_normal((m, k), dtype=np.float32); b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
  ja, jb = jnp.asarray(a), jnp.asarray(b)
  jf = jax.jit(lambda x, y: x @ y.T) if tb else jax.jit(lambda x, y: x @ y)
  ta, tbt = torch.from_numpy(a), torch.from_numpy(b)
  tf = (lambda: ta @ tbt.T) if tb else (lambda: ta @ tbt)
  jf(ja, jb).block_until_ready(); tf()
  reps = 200; res = {'jax': [], 'torch': []}
  for _ in range(5):
    s = time.perf_counter()
    for _ in range(reps): r = jf(ja, jb)
    r.block_until_ready(); res['jax'].append((time.perf_counter() - s) / reps)
    s = time.perf_counter()
    for _ in range(reps): r = tf()
    res['torch'].append((time.perf_counter() - s) / reps)
  j, t = statistics.median(res['jax']), statistics.median(res['torch'])
  gf = 2 * m * k * n / 1e9
  rows.append(dict(m=m, k=k, n=n, transposed_b=tb, jax_us=j * 1e6, torch_us=t * 1e6, jax_gflops=gf / j, torch_gflops=gf / t))
  print(f'{m}x{k}x{n}{" bT" if tb else "   "}  jax {j*1e6:7.1f} us ({gf/j:6.1f} GFLOP/s)  torch {t*1e6:7.1f} us ({gf/t:6.1f})  ratio {j/t:.2f}', flush=True)
json.dump({'xla_flags': os.environ.get('XLA_FLAGS', ''), 'torch_threads': torch.get_num_threads(), 'rows': rows},
          open(sys.argv[1], 'w'), indent=1)
