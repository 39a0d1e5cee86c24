"""Multi-head attention that takes its positional terms from the encoding."""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra_posenc.encodings import AttentionTerms

Array = jax.Array


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def broadcast_over_batch(bias: Array, batch_size: int) -> Array:
  """`bias` [1, ...] repeated to [batch_size, ...], with its gradient summed over the batch by a matrix product.

  A bias shared by every example (T5's) has as gradient the batch sum of the logits'
  gradient, in every layer. XLA:CPU sums the leading axis of a [4, 8, 2001, 2001] array in
  0.72 s but multiplies it by a vector of ones in 0.09 s; with the plain sum T5 cost 42%
  more per step than no encoding at the LRA shape (RESULTS.md, Performance). The forward
  broadcast fuses into the logits' sum.
  """
  return jnp.broadcast_to(bias, (batch_size,) + bias.shape[1:])


def _broadcast_over_batch_forward(bias: Array, batch_size: int) -> tuple[Array, None]:
  return broadcast_over_batch(bias, batch_size), None


def _broadcast_over_batch_backward(batch_size: int, _, gradient: Array) -> tuple[Array]:
  ones = jnp.ones((1, batch_size), gradient.dtype)
  summed = jnp.dot(ones, gradient.reshape(batch_size, -1), precision=jax.lax.Precision.HIGHEST)  # No TF32.
  return (summed.reshape((1,) + gradient.shape[1:]),)


broadcast_over_batch.defvjp(_broadcast_over_batch_forward, _broadcast_over_batch_backward)


def attention_weights(query: Array, key: Array, *, bias: Array | None, mask: Array | None) -> Array:
  """Softmax attention weights [batch, heads, q_length, k_length], in float32.

  Logits accumulate in float32 whatever the inputs' dtype, as in `jax.nn.dot_product_attention`:
  a bfloat16 ALiBi bias of -1000 would be off by up to 4.
  """
  logits = jnp.einsum('bqhd,bkhd->bhqk', query, key, preferred_element_type=jnp.float32)
  logits = logits / jnp.sqrt(query.shape[-1]).astype(jnp.float32)
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  return jax.nn.softmax(logits, axis=-1)


def attend(query: Array, key: Array, value: Array, *, bias: Array | None, mask: Array | None,
           dropout_rate: float = 0.0, dropout_rng: Array | None = None) -> Array:
  """Scaled dot-product attention over [batch, length, heads, head_dim] inputs.

  Without attention dropout this is `jax.nn.dot_product_attention`, which dispatches to
  fused kernels where the backend has them. Dropout on the attention weights needs the
  weights themselves, so it takes the explicit einsum path.
  """
  if dropout_rng is None or dropout_rate == 0.0:
    return jax.nn.dot_product_attention(query, key, value, bias=bias, mask=mask)
  weights = attention_weights(query, key, bias=bias, mask=mask).astype(value.dtype)
  keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, weights.shape)
  weights = jnp.where(keep, weights / (1.0 - dropout_rate), 0.0).astype(value.dtype)
  return jnp.einsum('bhqk,bkhd->bqhd', weights, value)


class MultiHeadAttention(nn.Module):
  """Attention whose positional terms come from the encoding.

  With `decode=True` (decoder self-attention during generation) keys and values are
  kept in the 'cache' collection: a first call with a full-length input shapes the
  cache; each later call with one query writes its key and value at `cache_index` and
  attends over the whole cache, so `terms` and `mask` must then cover every cache
  position. Keys are cached before any rotation, so rotary terms apply unchanged.
  Applied with mutable=['intermediates'], it also records its attention weights there
  (for diagnostics; computed only when asked for). Projections compute in `dtype`.
  """
  num_heads: int
  qkv_dim: int
  dropout_rate: float = 0.0
  decode: bool = False
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_kv: Array, *, mask: Array | None, terms: AttentionTerms,
               deterministic: bool, cache_index: Array | None = None) -> Array:
    head_dim = self.qkv_dim // self.num_heads
    projection = lambda name: nn.DenseGeneral((self.num_heads, head_dim), dtype=self.dtype, name=name)
    query = projection('query')(inputs_q)
    key = projection('key')(inputs_kv)
    value = projection('value')(inputs_kv)
    if self.decode:
      key, value = self._through_cache(key, value, cache_index)
    if terms.query_rotary is not None:
      query = terms.query_rotary.apply(query)
    if terms.key_rotary is not None:
      key = terms.key_rotary.apply(key)
    bias = terms.bias
    if bias is not None and bias.shape[0] != query.shape[0]:
      bias = broadcast_over_batch(bias, query.shape[0])
    if self.is_mutable_collection('intermediates'):
      self.sow('intermediates', 'attention_weights', attention_weights(query, key, bias=bias, mask=mask))
    dropout_rng = None if deterministic or self.dropout_rate == 0.0 else self.make_rng('dropout')
    out = attend(query, key, value, bias=bias, mask=mask, dropout_rate=self.dropout_rate, dropout_rng=dropout_rng)
    return nn.DenseGeneral(inputs_q.shape[-1], axis=(-2, -1), dtype=self.dtype, name='out')(out)

  def _through_cache(self, key: Array, value: Array, cache_index: Array | None) -> tuple[Array, Array]:
    initialized = self.has_variable('cache', 'cached_key')
    cached_key = self.variable('cache', 'cached_key', jnp.zeros, key.shape, key.dtype)
    cached_value = self.variable('cache', 'cached_value', jnp.zeros, value.shape, value.dtype)
    if not initialized:
      return key, value
    start = (0, cache_index, 0, 0)
    cached_key.value = jax.lax.dynamic_update_slice(cached_key.value, key, start)
    cached_value.value = jax.lax.dynamic_update_slice(cached_value.value, value, start)
    return cached_key.value, cached_value.value
