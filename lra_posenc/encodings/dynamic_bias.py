"""Dynamic position bias (x-transformers' DynamicPositionBias, after Wang et al.'s CrossFormer): an MLP
from the signed log distance sign(i - j) log(1 + |i - j|) to one bias per head.

The MLP is `depth` layers of `width` units with SiLU (x-transformers: depth 2, width dim / 4),
then a linear map to the heads. It reads any distance, so it extrapolates; whether it does
so well is what length tests measure. The sign keeps the two directions apart in the
encoder; a causal decoder attends only i - j >= 0. The MLP runs on every (query, key)
pair: memory grows with length^2 x width, once per stack, not per layer.
"""
import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from lra_posenc.encodings import base
from lra_posenc.validation import check_range


@dataclasses.dataclass(frozen=True)
class DynamicBiasOptions:
  width: int = 0  # 0: the model's width / 4, as x-transformers.
  depth: int = 2

  def __post_init__(self):
    check_range('width', self.width, at_least=0, why="0: the model's width / 4")
    check_range('depth', self.depth, at_least=1)


def signed_log_distance(query_positions: base.Array, key_positions: base.Array) -> base.Array:
  """sign(i - j) log(1 + |i - j|) for every query i and key j: [batch|1, q_length, k_length]."""
  relative = (query_positions[:, :, None] - key_positions[:, None, :]).astype(jnp.float32)
  return jnp.sign(relative) * jnp.log1p(jnp.abs(relative))


@base.register('dynamic_bias')
class DynamicBiasEncoding(base.PositionalEncoding):
  options: DynamicBiasOptions = DynamicBiasOptions()

  @nn.compact
  def attention_terms(self, query_positions: base.Array, key_positions: base.Array, *,
                      causal: bool) -> base.AttentionTerms:
    del causal
    width = self.options.width or max(1, self.dim // 4)
    x = signed_log_distance(query_positions, key_positions)[..., None]
    for layer in range(self.options.depth):
      x = nn.silu(nn.Dense(width, name=f'hidden_{layer}')(x))
    return base.AttentionTerms(bias=nn.Dense(self.num_heads, name='output')(x).transpose(0, 3, 1, 2))
