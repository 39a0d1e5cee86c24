"""The output layer and the label-smoothed loss of translation, formed a chunk of tokens at a time.

A batch's logits are [tokens, V]: 131 MB of float32 at 4096 tokens and V 8000, written forward and read
again with their exponentials backward, far outside the cache of a CPU core. Here each chunk of tokens
forms its logits, their reductions and, when differentiated, the gradients with respect to the output
layer's inputs and weights at once, while the chunk's logits are in cache: nothing of size [tokens, V]
is kept, and there are as many matrix products as autodiff's three (PERFORMANCE.md: the output
layer and loss a chunk of tokens at a time). The
loss is a weighted sum of per-token terms, so the cotangent that arrives backward is a scalar scaling
gradients already formed.
"""
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lra_posenc.models.seq2seq import output_logits

Array = jax.Array


class TokenSums(NamedTuple):
  """Weighted sums over target tokens. Only `loss` is differentiable; `nll` and `correct` carry none."""
  loss: Array  # Label-smoothed cross-entropy minus its floor (0 when the prediction is the smoothed target).
  nll: Array  # Negative log-likelihood of the target.
  correct: Array  # The target is the argmax (the first of tied logits, as greedy decoding picks).


def _smoothing(vocab_size: int, label_smoothing: float) -> tuple[float, float, float]:
  """The smoothed target's probability of the target (c) and of each other token (o), and the smallest
  label-smoothed cross-entropy, the entropy of that distribution."""
  confidence, off_value = 1.0 - label_smoothing, label_smoothing / (vocab_size - 1)
  floor = -(confidence * np.log(confidence) + (vocab_size - 1) * off_value * np.log(off_value + 1e-20))
  return confidence, off_value, floor


CPU_CHUNK_TOKENS = 128  # The fastest of 64, 128 and 256 on a 2-core CPU (PERFORMANCE.md).


def automatic_chunk_tokens(backend: str) -> int:
  """`loss.chunk_tokens` 0's value: chunks on a CPU, whose cache they fit; on a GPU or TPU one chunk, since a
  loop of small products is a chain of small kernels launched one by one from the host."""
  return CPU_CHUNK_TOKENS if backend == 'cpu' else np.iinfo(np.int32).max


def token_sums(states: Array, table: Array, bias: Array | None, targets: Array, weights: Array, *,
               label_smoothing: float, chunk_tokens: int) -> TokenSums:
  """Sums over tokens, each weighted by `weights` (0: not counted), of the losses of logits
  `output_logits(states, table, bias)` [..., V] against `targets` [...], `chunk_tokens` tokens at a time.

  `states` [..., d] are the output layer's inputs, `table` [V, d] and `bias` [V] (or None) its weights.
  The gradient flows to `states`, `table` and `bias` through `loss` only.
  """
  weights = jax.lax.stop_gradient(weights)  # Per-token weights (padding, eval rows) are data, not parameters.
  sums = _chunked_sums(states, table, bias, targets, weights, label_smoothing, chunk_tokens)
  return TokenSums(sums[0], jax.lax.stop_gradient(sums[1]), jax.lax.stop_gradient(sums[2]))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _chunked_sums(states, table, bias, targets, weights, label_smoothing, chunk_tokens):
  return _scan_chunks(states, table, bias, targets, weights, label_smoothing, chunk_tokens, with_gradients=False)[0]


def _chunked_sums_forward(states, table, bias, targets, weights, label_smoothing, chunk_tokens):
  return _scan_chunks(states, table, bias, targets, weights, label_smoothing, chunk_tokens, with_gradients=True)


def _chunked_sums_backward(label_smoothing, chunk_tokens, gradients, cotangent):
  del label_smoothing, chunk_tokens
  # The cotangents of nll and correct are zeros: token_sums stops their gradient.
  scale = cotangent[0]
  states, table, bias = jax.tree.map(lambda g: (scale * g).astype(g.dtype), gradients)
  return states, table, bias, None, None


_chunked_sums.defvjp(_chunked_sums_forward, _chunked_sums_backward)


def _scan_chunks(states, table, bias, targets, weights, label_smoothing, chunk_tokens, *, with_gradients):
  """(loss, nll, correct) sums [3] and, `with_gradients`, the loss's gradients with respect to states,
  table and bias, over chunks of `chunk_tokens` tokens (the last one padded with tokens of weight 0)."""
  if states.shape[:-1] != targets.shape or targets.shape != weights.shape:
    raise ValueError(f'states {states.shape} need targets and weights of shape {states.shape[:-1]}; got '
                     f'{targets.shape} and {weights.shape}')
  vocab_size, dim = table.shape
  tokens = targets.size
  chunk = min(chunk_tokens, tokens)
  chunks = -(-tokens // chunk)
  pad = lambda x: jnp.pad(x.reshape(tokens, *x.shape[targets.ndim:]),
                          [(0, chunks * chunk - tokens)] + [(0, 0)] * (x.ndim - targets.ndim))
  xs = [pad(x).reshape(chunks, chunk, *x.shape[targets.ndim:]) for x in (states, targets, weights)]
  confidence, off_value, floor = _smoothing(vocab_size, label_smoothing)

  def chunk_terms(carry, chunk_inputs):
    y, target, weight = chunk_inputs
    logits = output_logits(y, table, bias)
    max_logit = logits.max(-1, keepdims=True)
    shifted = logits - max_logit  # Terms of the size of the spread.
    exp = jnp.exp(shifted)
    sum_exp = exp.sum(-1)
    log_sum_exp = jnp.log(sum_exp)
    target_shifted = jnp.take_along_axis(shifted, target[:, None], -1)[:, 0]
    # -c log p_t - o sum_{j != t} log p_j, the smoothed cross-entropy, is lse - (c - o) s_t - o sum_j s_j.
    smoothed = log_sum_exp - (confidence - off_value) * target_shifted - off_value * shifted.sum(-1) - floor
    # argmax's first index of the maximum, as a plain min-reduction: XLA:CPU's (value, index) reduction for
    # argmax took 72 ms of an 815 ms :tiny train step (PERFORMANCE.md).
    first_max = jnp.where(logits == max_logit, jnp.arange(vocab_size), vocab_size).min(-1)
    correct = first_max == target
    counted = weight != 0
    total = lambda x: jnp.where(counted, x * weight, 0.0).sum()
    sums = carry[0] + jnp.stack([total(smoothed), total(log_sum_exp - target_shifted), total(correct)])
    if not with_gradients:
      return (sums,), None
    # d loss / d logits = weight (softmax - smoothed target).
    is_target = jnp.arange(vocab_size) == target[:, None]
    logit_gradient = jnp.where(counted[:, None], weight[:, None] * (
        exp / sum_exp[:, None] - jnp.where(is_target, confidence, off_value)), 0.0)
    _, table_gradient, bias_gradient = carry
    table_gradient += jnp.dot(logit_gradient.astype(y.dtype).T, y, preferred_element_type=jnp.float32)
    if bias is not None:
      bias_gradient += logit_gradient.sum(0)
    state_gradient = jnp.dot(logit_gradient.astype(table.dtype), table).astype(y.dtype)
    return (sums, table_gradient, bias_gradient), state_gradient

  init = (jnp.zeros(3, jnp.float32),)
  if with_gradients:
    init += (jnp.zeros((vocab_size, dim), jnp.float32), None if bias is None else jnp.zeros_like(bias, jnp.float32))
  if chunks == 1:  # No loop at all: XLA:GPU would still run a one-trip while loop from the host.
    carry, state_gradients = chunk_terms(init, [x[0] for x in xs])
    state_gradients = None if state_gradients is None else state_gradients[None]
  else:
    carry, state_gradients = jax.lax.scan(chunk_terms, init, xs)
  if not with_gradients:
    return carry[0], None
  state_gradients = state_gradients.reshape(chunks * chunk, dim)[:tokens].reshape(states.shape)
  bias_gradient = None if bias is None else carry[2].astype(bias.dtype)
  return carry[0], (state_gradients, carry[1].astype(table.dtype), bias_gradient)
