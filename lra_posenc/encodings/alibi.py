"""ALiBi (Press et al. 2022): a per-head linear penalty on query-key distance.

The penalty is -slope * |i - j|. In a causal decoder only j <= i is attended, where
this is the paper's -slope * (i - j); in a bidirectional encoder both sides are
penalised alike (x-transformers' convention; DeepMind's randomized-positions code adds
half a slope on one side instead), which makes a bidirectional encoder blind to
reversing the whole sequence (reversal preserves |i - j|) unless something else, like
a CLS token at position 0, breaks the symmetry. With `learned_slopes` the slopes are
learned per head, as their logarithms (so they stay positive), from the paper's.
"""
import dataclasses
import math

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from lra_posenc.encodings import base


@dataclasses.dataclass(frozen=True)
class AlibiOptions:
  learned_slopes: bool = False


def alibi_slopes(num_heads: int) -> np.ndarray:
  """The paper's geometric slopes, with its recipe for head counts that are not powers of two."""

  def power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (i + 1) for i in range(n)]

  if num_heads < 1:
    raise ValueError(f'alibi needs at least one head, got {num_heads}')
  closest = 2 ** math.floor(math.log2(num_heads))
  slopes = power_of_two_slopes(closest)
  if closest != num_heads:
    slopes += power_of_two_slopes(2 * closest)[0::2][:num_heads - closest]
  return np.asarray(slopes, np.float32)


@base.register('alibi')
class AlibiEncoding(base.PositionalEncoding):
  options: AlibiOptions = AlibiOptions()

  @nn.compact
  def attention_terms(self, query_positions: base.Array, key_positions: base.Array, *,
                      causal: bool) -> base.AttentionTerms:
    del causal
    slopes = jnp.asarray(alibi_slopes(self.num_heads))
    if self.options.learned_slopes:
      slopes = jnp.exp(self.param('log_slopes', lambda *_: jnp.log(slopes)))
    return base.AttentionTerms(bias=-slopes[None, :, None, None] * base.absolute_distance(query_positions,
                                                                                           key_positions))
