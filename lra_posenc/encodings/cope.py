"""CoPE, contextual position encoding (Golovneva et al. 2024): positions counted by the context.

Query i gates each key j it may attend to, g_ij = sigmoid(q_i.k_j / sqrt(head_dim)) (0 where
masked), and places it at p_ij = the sum of the gates from j to i: how many keys between them
"count". A learned embedding e[t] of each integer t adds q_i.e[p_ij] to the logits, read
between floor(p) and ceil(p) by linear interpolation, with p capped at max_positions - 1. As the
paper's code: e starts at zero and is shared by the heads (one table per stack here, as every
encoding's terms). The paper is causal. In the bidirectional encoder a key after the query is
placed at the sum of the gates from i to j and reads a second table, so that the two
directions stay apart; keys up to the query read the paper's.
"""
import dataclasses

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra_posenc.encodings import base
from lra_posenc.validation import check_range


@dataclasses.dataclass(frozen=True)
class CopeOptions:
  max_positions: int = 0  # 0: the model's max_len.

  def __post_init__(self):
    check_range('max_positions', self.max_positions, at_least=0, why="0: the model's max_len")


def interpolated(logits_by_position: base.Array, positions: base.Array) -> base.Array:
  """logits_by_position [..., t] read at fractional `positions` [..., k] between floor and ceil."""
  floor = jnp.floor(positions)
  below = jnp.take_along_axis(logits_by_position, floor.astype(jnp.int32), axis=-1)
  above = jnp.take_along_axis(logits_by_position, jnp.ceil(positions).astype(jnp.int32), axis=-1)
  fraction = positions - floor
  return fraction * above + (1.0 - fraction) * below


@flax.struct.dataclass
class CopeTerm(base.ContentTerm):
  """The position embeddings [2, max_positions, head_dim] (keys up to the query, keys after it), the query
  and key positions [batch|1, length], and whether keys after the query count (the bidirectional encoder)."""
  embeddings: base.Array
  query_positions: base.Array
  key_positions: base.Array
  bidirectional: bool = flax.struct.field(pytree_node=False)

  def logits(self, query: base.Array, key: base.Array, mask: base.Array | None) -> base.Array:
    """q_i.e[p_ij] for every query i and key j: [batch, heads, q_length, k_length]."""
    query, key = query.astype(jnp.float32), key.astype(jnp.float32)
    gates = jax.nn.sigmoid(jnp.einsum('bqhd,bkhd->bhqk', query, key) / np.sqrt(query.shape[-1]))
    if mask is not None:
      gates = jnp.where(mask, gates, 0.0)
    cap = self.embeddings.shape[1] - 1
    key_positions, query_positions = self.key_positions[:, None, None, :], self.query_positions[:, None, :, None]
    up_to_query = key_positions <= query_positions  # Keys are in position order, as every caller orders them.
    counted_back = jnp.flip(jnp.cumsum(jnp.flip(jnp.where(up_to_query, gates, 0.0), -1), -1), -1)  # Keys j ... i.
    logits = interpolated(jnp.einsum('bqhd,td->bhqt', query, self.embeddings[0]), jnp.minimum(counted_back, cap))
    if not self.bidirectional:
      return logits
    counted_on = jnp.cumsum(jnp.where(key_positions >= query_positions, gates, 0.0), -1)  # Keys i ... j.
    after = interpolated(jnp.einsum('bqhd,td->bhqt', query, self.embeddings[1]), jnp.minimum(counted_on, cap))
    return jnp.where(up_to_query, logits, after)


@base.register('cope')
class CopeEncoding(base.PositionalEncoding):
  options: CopeOptions = CopeOptions()

  @nn.compact
  def attention_terms(self, query_positions: base.Array, key_positions: base.Array, *,
                      causal: bool) -> base.AttentionTerms:
    max_positions = self.options.max_positions or self.max_len
    embeddings = self.param('embeddings', nn.initializers.zeros, (2, max_positions, self.head_dim))
    return base.AttentionTerms(content=CopeTerm(embeddings, query_positions, key_positions, bidirectional=not causal))
