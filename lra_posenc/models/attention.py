"""Multi-head attention that takes its positional terms from the encoding, computed by XLA or cuDNN."""
import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra_posenc.encodings import AttentionTerms
from lra_posenc.models.dense import dense_dot_general
from lra_posenc.models.dropout import dropout

Array = jax.Array


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def broadcast_over_batch(bias: Array, batch_size: int) -> Array:
  """`bias` [1, ...] repeated to [batch_size, ...], with its gradient summed over the batch by a matrix product.

  A bias shared by every example (T5's) has as gradient the batch sum of the logits'
  gradient, in every layer. XLA:CPU sums the leading axis of a [4, 8, 2001, 2001] array in
  0.72 s but multiplies it by a vector of ones in 0.09 s; with the plain sum T5 cost 42%
  more per step than no encoding at the LRA shape (PERFORMANCE.md). The forward
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


IMPLEMENTATIONS = ('auto', 'xla', 'cudnn')  # Values of `model.attention_implementation`.


@dataclasses.dataclass(frozen=True)
class AttentionCall:
  """The static facts of one attention call that decide whether cuDNN's fused kernel can serve it."""
  dtype: Any
  head_dim: int
  query_length: int
  key_length: int
  has_bias: bool
  dropout_rate: float
  training: bool
  has_content: bool = False  # The encoding computes logits from the queries and keys.
  padded: bool = False  # Some keys are padding (`key_valid`), which cuDNN takes as per-row key counts.


@dataclasses.dataclass(frozen=True)
class AttentionPath:
  """Which implementation computes an attention call, and why it is not cuDNN when it is not."""
  implementation: str  # 'xla' or 'cudnn'.
  reason: str = ''


def nvidia_compute_capability(device: Any) -> tuple[int, ...] | None:
  """`device`'s CUDA compute capability, or None for any device that is not an NVIDIA GPU."""
  if device.platform != 'gpu' or 'cuda' not in device.client.platform_version.lower():
    return None
  return tuple(int(part) for part in device.compute_capability.split('.'))


def cudnn_obstacle(call: AttentionCall, device: Any) -> str | None:
  """Why cuDNN's fused attention cannot serve `call` on `device`; None when it can.

  The rules are those `jax.nn.dot_product_attention(implementation='cudnn')` enforces for
  bfloat16/float16 flash attention, checked here before tracing so that 'auto' can fall
  back and 'cudnn' can fail with the reason instead of inside compilation.
  """
  capability = nvidia_compute_capability(device)
  if capability is None:
    return f'cuDNN fused attention needs an NVIDIA GPU; the device is {device.platform} ({device.device_kind})'
  if call.has_content:
    return ('the positional encoding computes attention logits from the queries and keys (a content term); '
            'cuDNN takes only a ready bias, so XLA computes the whole call')
  if jnp.dtype(call.dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
    return f'cuDNN fused attention computes in bfloat16 or float16; model.dtype is {jnp.dtype(call.dtype).name}'
  if call.training and call.dropout_rate > 0:
    return (f'attention dropout (model.attention_dropout_rate={call.dropout_rate}) needs the attention weights, '
            'which jax.nn.dot_product_attention does not expose')
  largest_head = 256 if capability >= (9, 0) else 128
  if call.head_dim % 8 or call.head_dim > largest_head:
    return (f'cuDNN needs a head dimension that is a multiple of 8 and at most {largest_head} on compute capability '
            f'{".".join(map(str, capability))}; model.qkv_dim / model.num_heads = {call.head_dim}')
  if call.training and (call.has_bias or call.padded) and (call.query_length % 2 or call.key_length % 2):
    return (f'cuDNN trains with an attention bias or key padding only at even lengths; this call attends '
            f'{call.query_length} queries to {call.key_length} keys')
  return None


def choose_path(requested: str, call: AttentionCall, device: Any) -> AttentionPath:
  """The path `requested` ('auto', 'xla' or 'cudnn') takes for `call`; 'cudnn' that cannot run is a ValueError."""
  if requested == 'xla':
    return AttentionPath('xla', 'model.attention_implementation=xla')
  obstacle = cudnn_obstacle(call, device)
  if obstacle is None:
    return AttentionPath('cudnn')
  if requested == 'cudnn':
    raise ValueError(f"model.attention_implementation='cudnn' cannot run here: {obstacle}; use 'auto' (cuDNN where "
                     "it can serve a call, XLA elsewhere) or 'xla'")
  return AttentionPath('xla', obstacle)


# The logits' product for bfloat16 inputs: `jax.nn.dot_product_attention`'s choice (inputs in bfloat16, float32
# accumulation, in the backward products too); None (the default) for float32, the other model dtype.
LOGIT_ALGORITHMS = {jnp.dtype(jnp.bfloat16): jax.lax.DotAlgorithmPreset.BF16_BF16_F32}


def attention_weights(query: Array, key: Array, *, bias: Array | None, mask: Array | None) -> Array:
  """Softmax attention weights [batch, heads, q_length, k_length], in float32.

  Logits accumulate in float32 whatever the inputs' dtype, as in `jax.nn.dot_product_attention`:
  a bfloat16 ALiBi bias of -1000 would be off by up to 4.
  """
  logits = jnp.einsum('bqhd,bkhd->bhqk', query, key, precision=LOGIT_ALGORITHMS.get(jnp.dtype(query.dtype)),
                      preferred_element_type=jnp.float32)
  logits = logits / jnp.sqrt(query.shape[-1]).astype(jnp.float32)
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  return jax.nn.softmax(logits, axis=-1)


def attention_mask(key_valid: Array | None, *, causal: bool, query_length: int) -> Array | None:
  """The boolean mask [batch|1, 1, q_length, k_length] of keys each query may attend to.

  `key_valid` [batch|1, k_length] marks real keys; with `causal`, query i also sees only
  keys j <= i (queries and keys at the same positions).
  """
  mask = None if key_valid is None else key_valid[:, None, None, :]
  if causal:
    positions = jnp.arange(query_length)
    causal_mask = (positions[:, None] >= positions[None, :])[None, None]
    mask = causal_mask if mask is None else mask & causal_mask
  return mask


def attend(query: Array, key: Array, value: Array, *, bias: Array | None, key_valid: Array | None,
           causal: bool = False, implementation: str = 'xla', dropout_rate: float = 0.0,
           dropout_rng: Array | None = None) -> Array:
  """Scaled dot-product attention over [batch, length, heads, head_dim] inputs.

  `implementation` is 'xla' or 'cudnn' (as `choose_path` decided). On XLA the weights are
  formed explicitly (`attention_weights`), dropped out where asked, and applied by an einsum:
  `jax.nn.dot_product_attention`'s arithmetic up to rounding (it multiplies by 1/sqrt(head_dim)
  where this divides), without the `vmap` under which it computes the softmax. Given that
  `vmap`, XLA:CPU left the softmax's backward sum to a slow YNNPACK reduction; with the weights
  formed here the language model's `:cpu` train step takes about 0.92 of the time it took
  (PERFORMANCE.md). cuDNN takes padding as per-row key counts, so there `key_valid` must mark a prefix of the
  keys (trailing padding, as every pipeline here pads): anything else makes the output
  NaN, which the trainer's non-finite guard reports, rather than silently wrong.
  """
  if implementation == 'cudnn':
    return _attend_cudnn(query, key, value, bias=bias, key_valid=key_valid, causal=causal)
  if bias is not None and bias.shape[0] != query.shape[0]:
    bias = broadcast_over_batch(bias, query.shape[0])
  mask = attention_mask(key_valid, causal=causal, query_length=query.shape[1])
  weights = attention_weights(query, key, bias=bias, mask=mask).astype(value.dtype)
  if dropout_rng is not None and dropout_rate > 0.0:
    weights = dropout(weights, dropout_rate, dropout_rng)
  return jnp.einsum('bhqk,bkhd->bqhd', weights, value)


def _attend_cudnn(query: Array, key: Array, value: Array, *, bias: Array | None, key_valid: Array | None,
                  causal: bool) -> Array:
  """cuDNN's fused attention; the bias in the inputs' dtype (cuDNN adds it there), padding as key counts."""
  if bias is not None:
    bias = bias.astype(query.dtype)
  if key_valid is None:
    return jax.nn.dot_product_attention(query, key, value, bias=bias, is_causal=causal, implementation='cudnn')
  key_valid = jnp.broadcast_to(key_valid, (query.shape[0], key.shape[1]))
  counts = key_valid.sum(-1, dtype=jnp.int32)
  is_prefix = jnp.all(key_valid == (jnp.arange(key.shape[1]) < counts[:, None]), axis=-1)
  # A row without keys (an all-padding row, weight 0) attends to its first key, as cuDNN needs one.
  out = jax.nn.dot_product_attention(query, key, value, bias=bias, is_causal=causal,
                                     key_value_seq_lengths=jnp.maximum(counts, 1), implementation='cudnn')
  return jnp.where(is_prefix[:, None, None, None], out, jnp.nan)


class MultiHeadAttention(nn.Module):
  """Attention whose positional terms come from the encoding.

  Each call takes the path `choose_path` picks for `implementation` ('auto', 'xla' or
  'cudnn') from the call's static facts, when it is traced. `key_valid` [batch|1,
  k_length] marks the keys that may be attended to; `causal` lets query i see keys j <= i.
  With `decode=True` (decoder self-attention during generation) keys and values are
  kept in the 'cache' collection: a first call with a full-length input shapes the
  cache; each later call with one query writes its key and value at `cache_index` and
  attends over the whole cache, so `terms` and `key_valid` must then cover every cache
  position. Keys are cached before any rotation, so rotary terms apply unchanged.
  Applied with mutable=['intermediates'], it also records its attention weights there
  (for diagnostics; computed only when asked for). Projections compute in `dtype`, with biases where
  `use_bias`; `out_kernel_init` initialises the output projection, `kernel_init` the others.
  """
  num_heads: int
  qkv_dim: int
  dropout_rate: float = 0.0
  decode: bool = False
  dtype: jnp.dtype = jnp.float32
  implementation: str = 'auto'
  use_bias: bool = True
  kernel_init: nn.initializers.Initializer = nn.linear.default_kernel_init
  out_kernel_init: nn.initializers.Initializer = nn.linear.default_kernel_init

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_kv: Array, *, key_valid: Array | None, terms: AttentionTerms,
               deterministic: bool, causal: bool = False, cache_index: Array | None = None) -> Array:
    head_dim = self.qkv_dim // self.num_heads
    projection = lambda name: nn.DenseGeneral((self.num_heads, head_dim), dtype=self.dtype, use_bias=self.use_bias,
                                              kernel_init=self.kernel_init, dot_general=dense_dot_general, name=name)
    query = projection('query')(inputs_q)
    key = projection('key')(inputs_kv)
    value = projection('value')(inputs_kv)
    if self.decode:
      key, value = self._through_cache(key, value, cache_index)
    if terms.query_rotary is not None:
      query = terms.query_rotary.apply(query)
    if terms.key_rotary is not None:
      key = terms.key_rotary.apply(key)
    sowing = self.is_mutable_collection('intermediates')
    mask = attention_mask(key_valid, causal=causal, query_length=query.shape[1]) if (
        sowing or terms.content is not None) else None
    bias = terms.logit_bias(query, key, mask)
    if sowing:
      self.sow('intermediates', 'attention_weights', attention_weights(query, key, bias=bias, mask=mask))
    call = AttentionCall(dtype=query.dtype, head_dim=head_dim, query_length=query.shape[1],
                         key_length=key.shape[1], has_bias=bias is not None, dropout_rate=self.dropout_rate,
                         training=not deterministic, has_content=terms.content is not None,
                         padded=key_valid is not None)
    path = choose_path(self.implementation, call, jax.local_devices()[0])
    dropout_rng = None if deterministic or self.dropout_rate == 0.0 else self.make_rng('dropout')
    out = attend(query, key, value, bias=bias, key_valid=key_valid, causal=causal,
                 implementation=path.implementation, dropout_rate=self.dropout_rate, dropout_rng=dropout_rng)
    return nn.DenseGeneral(inputs_q.shape[-1], axis=(-2, -1), dtype=self.dtype, use_bias=self.use_bias,
                           kernel_init=self.out_kernel_init, dot_general=dense_dot_general, name='out')(out)

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
