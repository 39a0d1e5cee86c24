"""T5 relative position bias (Raffel et al. 2020): a learned scalar per head and distance bucket.

Distances below num_buckets/2 (per direction, when bidirectional) get their own bucket;
longer ones share log-spaced buckets up to max_distance. Encoders use bidirectional
buckets, causal decoders one-sided ones.

max_distance defaults to 0: the model's max_len, the longest input it trains on (at least num_buckets), so that
every bucket is reached by a distance inside a training input and none keeps its initial value untrained (T5's
own 128 against its 512-token inputs also ends the buckets inside them). A fixed max_distance past the training
length leaves its last buckets untrained: 128 against windows of 64 left buckets 27-31 at their initial values.
"""
import dataclasses
from typing import ClassVar

import flax.linen as nn
import jax.numpy as jnp

from lra_posenc.encodings import base
from lra_posenc.validation import check_range


@dataclasses.dataclass(frozen=True)
class T5Options:
  num_buckets: int = 32
  max_distance: int = 0  # 0: the model's max_len (at least num_buckets).

  # Defaults before 2026-12-06, which config.json files of other encodings' runs record (`encodings.upgrade_config`).
  FORMER_DEFAULTS: ClassVar[dict] = {'max_distance': 128}

  def __post_init__(self):
    if self.num_buckets < 4 or self.num_buckets % 2:
      raise ValueError(f'num_buckets={self.num_buckets!r} must be even and >= 4 (half per direction, half of '
                       'those exact)')
    if self.max_distance != 0:
      check_range('max_distance', self.max_distance, above=self.num_buckets // 2,
                  why="log-spaced buckets start where the exact ones end; or 0: the model's max_len")

  def resolved_max_distance(self, max_len: int) -> int:
    """`max_distance`, or with 0 the model's `max_len`, at least `num_buckets`."""
    return self.max_distance or max(max_len, self.num_buckets)


def relative_position_bucket(relative_position: base.Array, *, bidirectional: bool, num_buckets: int,
                             max_distance: int) -> base.Array:
  """Bucket ids for key_position - query_position."""
  bucket = jnp.zeros_like(relative_position)
  distance = -relative_position
  if bidirectional:
    num_buckets //= 2
    bucket += (distance < 0).astype(jnp.int32) * num_buckets
    distance = jnp.abs(distance)
  else:
    distance = jnp.maximum(distance, 0)
  max_exact = num_buckets // 2
  log_ratio = jnp.log(distance.astype(jnp.float32) / max_exact + jnp.finfo(jnp.float32).eps)
  large = max_exact + (log_ratio / jnp.log(max_distance / max_exact) * (num_buckets - max_exact)).astype(jnp.int32)
  large = jnp.minimum(large, num_buckets - 1)
  return bucket + jnp.where(distance < max_exact, distance, large)


@base.register('t5')
class T5Encoding(base.PositionalEncoding):
  options: T5Options = T5Options()

  @nn.compact
  def attention_terms(self, query_positions: base.Array, key_positions: base.Array, *,
                      causal: bool) -> base.AttentionTerms:
    buckets = relative_position_bucket(
        key_positions[:, None, :] - query_positions[:, :, None], bidirectional=not causal,
        num_buckets=self.options.num_buckets, max_distance=self.options.resolved_max_distance(self.max_len))
    embedding = self.param('relative_bias', nn.initializers.normal(0.02),
                           (self.options.num_buckets, self.num_heads))
    return base.AttentionTerms(bias=jnp.take(embedding, buckets, axis=0).transpose(0, 3, 1, 2))
