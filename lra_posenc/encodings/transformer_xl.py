"""Transformer-XL relative attention (Dai et al. 2019): logits q.k + u.k + (q + v).W_R R_{i-j}.

R_d is the sinusoidal embedding (of the model's width) of the signed distance d = i - j from
key j to query i, W_R a learned projection to the heads, u and v learned per head (the paper's
content and position biases); the inputs get no absolute encoding. A causal decoder attends
only d >= 0, the paper's setting. The bidirectional encoder also reads d < 0, whose embedding
differs (sine is odd), as XLNet's bidirectional attention does. u, v and W_R are one set per
stack, as every encoding's terms here (the paper's code shares u and v across layers, W_R is
per layer there). The whole term is scaled with q.k, by 1/sqrt(head_dim).

The projection runs once per stack over every distance from -(n - 1) to n - 1, n the larger of
max_len and the call's lengths; each pair then reads its row: the paper's relative shift,
written as a gather so that any positions (a decoding step, a randomized draw) work.
"""
import flax
import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from lra_posenc.encodings import base


def relative_sinusoids(span: int, dim: int) -> np.ndarray:
  """R_d for d = -(span - 1) ... span - 1 (row d + span - 1): [sin(d w_k), cos(d w_k)], w_k =
  10000^(-2k/dim), float32 [2 span - 1, dim], the paper's concatenated (not interleaved) layout."""
  distances = np.arange(-(span - 1), span, dtype=np.float64)[:, None]
  angles = distances * 10000.0 ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
  return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)[:, :dim].astype(np.float32)


@flax.struct.dataclass
class TransformerXlTerm(base.ContentTerm):
  """The paper's content and position biases u and v [heads, head_dim], the projected embeddings of every
  distance [2 span - 1, heads, head_dim], and each query-key pair's row among them [batch|1, q, k]."""
  content_bias: base.Array
  position_bias: base.Array
  projected: base.Array
  rows: base.Array

  def logits(self, query: base.Array, key: base.Array, mask: base.Array | None) -> base.Array:
    """(u.k_j + (q_i + v).P[i - j]) / sqrt(head_dim): [batch, heads, q_length, k_length]."""
    del mask
    scale = 1.0 / np.sqrt(query.shape[-1])
    query = query.astype(jnp.float32)
    content = jnp.einsum('hd,bkhd->bhk', self.content_bias, key.astype(jnp.float32))[:, :, None, :]
    by_distance = jnp.einsum('bqhd,rhd->bhqr', query + self.position_bias, self.projected)
    rows = jnp.broadcast_to(self.rows[:, None], by_distance.shape[:3] + self.rows.shape[-1:])
    position = jnp.take_along_axis(by_distance, rows, axis=-1, mode='fill', fill_value=jnp.nan)
    return (content + position) * scale


@base.register('transformer_xl')
class TransformerXlEncoding(base.PositionalEncoding):

  @nn.compact
  def attention_terms(self, query_positions: base.Array, key_positions: base.Array, *,
                      causal: bool) -> base.AttentionTerms:
    del causal
    span = max(self.max_len, query_positions.shape[1], key_positions.shape[1])
    projected = nn.DenseGeneral((self.num_heads, self.head_dim), use_bias=False, name='relative_projection')(
        jnp.asarray(relative_sinusoids(span, self.dim)))
    init = nn.initializers.normal(0.02)
    return base.AttentionTerms(content=TransformerXlTerm(
        content_bias=self.param('content_bias', init, (self.num_heads, self.head_dim)),
        position_bias=self.param('position_bias', init, (self.num_heads, self.head_dim)),
        projected=projected,
        rows=query_positions[:, :, None] - key_positions[:, None, :] + (span - 1)))
