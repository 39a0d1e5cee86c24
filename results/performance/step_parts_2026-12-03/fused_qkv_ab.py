"""A/B in one process: the train step with self-attention's query, key and value projections as three products
(as the model computes them) against one product of their concatenated kernels, the parameters unchanged
(measurement only; rotary terms and biases as the model applies them, no sown weights, no cache); 8 interleaved
windows of 5 steps. From the repository root:

    python results/performance/step_parts_2026-12-03/fused_qkv_ab.py lm1b|nanogpt|CONFIG[:ARG] OUTPUT.json [--config.KEY=VALUE ...]
"""
import json, statistics, sys
import jax, jax.numpy as jnp, numpy as np
import flax.linen as nn
from step_config import step_config
from lra_posenc import benchmarking
from lra_posenc.tasks import TASKS
from lra_posenc.training import provenance
from lra_posenc.models import attention, transformer
from lra_posenc.models.dense import _product, dense_dot_general
config = step_config(sys.argv[1], sys.argv[3:])


class Fused(attention.MultiHeadAttention):
  @nn.compact
  def __call__(self, inputs_q, inputs_kv, *, key_valid, terms, deterministic, causal=False, cache_index=None):
    head_dim = self.qkv_dim // self.num_heads
    projection = lambda name: nn.DenseGeneral((self.num_heads, head_dim), dtype=self.dtype, use_bias=self.use_bias,
                                              kernel_init=self.kernel_init, dot_general=dense_dot_general, name=name)
    names = ('query', 'key', 'value')
    mods = [projection(n) for n in names]
    if self.is_initializing() or inputs_q is not inputs_kv:
      query, key, value = mods[0](inputs_q), mods[1](inputs_kv), mods[2](inputs_kv)
    else:
      p = self.variables['params']
      d = inputs_q.shape[-1]
      kernel = jnp.concatenate([p[n]['kernel'].reshape(d, -1) for n in names], axis=1)
      x = inputs_q.reshape(-1, d)
      out = _product(x, kernel, None)
      if self.use_bias:
        out = out + jnp.concatenate([p[n]['bias'].reshape(-1) for n in names])
      out = out.reshape(inputs_q.shape[:-1] + (3, self.num_heads, head_dim))
      query, key, value = out[..., 0, :, :], out[..., 1, :, :], out[..., 2, :, :]
    if terms.query_rotary is not None:
      query = terms.query_rotary.apply(query)
    if terms.key_rotary is not None:
      key = terms.key_rotary.apply(key)
    bias = terms.logit_bias(query, key, None)
    dropout_rng = None if deterministic or self.dropout_rate == 0.0 else self.make_rng('dropout')
    out = attention.attend(query, key, value, bias=bias, key_valid=key_valid, causal=causal, implementation='xla',
                           dropout_rate=self.dropout_rate, dropout_rng=dropout_rng)
    return nn.DenseGeneral(inputs_q.shape[-1], axis=(-2, -1), dtype=self.dtype, use_bias=self.use_bias,
                           kernel_init=self.out_kernel_init, dot_general=dense_dot_general, name='out')(out)


def build(fused):
  transformer.MultiHeadAttention = Fused if fused else attention.MultiHeadAttention
  try:
    return benchmarking.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
  finally:
    transformer.MultiHeadAttention = attention.MultiHeadAttention


timers = {'three_products': build(False), 'one_product': build(True)}
losses = {k: t.first_step_loss for k, t in timers.items()}
seconds = benchmarking.interleaved_windows(timers, windows=8, steps_per_window=5)
ms = {name: 1e3 * statistics.median(s) / 5 for name, s in seconds.items()}
abs_sums = {name: float(sum(np.abs(np.asarray(leaf, np.float64)).sum() for leaf in jax.tree.leaves(t._state.params)))
            for name, t in timers.items()}
result = {'config': sys.argv[1], 'sets': sys.argv[3:], 'ms_per_step': ms, 'ratio': ms['one_product'] / ms['three_products'],
          'first_step_loss': losses, 'params_abs_sum_after_46_steps': abs_sums, 'cpu': provenance.host_cpu(),
          'windows_seconds': seconds}
print(json.dumps({k: result[k] for k in ('config', 'ms_per_step', 'ratio', 'first_step_loss', 'params_abs_sum_after_46_steps')}, indent=1))
json.dump(result, open(sys.argv[2], 'w'), indent=1)
