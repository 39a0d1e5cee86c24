"""Dropout drawn from 16 random bits per element: half the random-number work of 32-bit draws.

On XLA:CPU the random bits of the dropout masks took about a quarter of a translation train
step (PERFORMANCE.md); each 32-bit word here serves two elements. The keep
probability is rounded to a multiple of 2^-16 (rate 0.1 keeps with probability 58982 / 65536,
0.1000061 dropped) and kept elements are scaled by its inverse in float32, so every element's
expectation is its input, as with flax's `nn.Dropout`.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array

_LEVELS = 1 << 16  # Distinct values of a 16-bit draw.


def _kept_draws(rate: float) -> int:
  """How many of the 2^16 values of a draw keep an element at dropout `rate`."""
  return round((1.0 - rate) * _LEVELS)


def dropout(x: Array, rate: float, rng: Array) -> Array:
  """`x` with each element zeroed independently with probability `rate` (to 2^-16), the rest scaled up.

  `rng` is any PRNG key; the mask depends on it and on `x.shape` alone. The scaling is computed in
  float32 whatever `x.dtype` (a bfloat16 scale of 1/0.9 would be 0.2% low).
  """
  threshold = _kept_draws(rate)
  if threshold >= _LEVELS:
    return x
  if threshold == 0:
    return jnp.zeros_like(x)
  words = jax.random.bits(rng, (-(-x.size // 2),), jnp.uint32)
  # Element 2i draws the high half of word i, element 2i + 1 the low half. The two halves' keep decisions
  # are interleaved as booleans, a quarter of the bytes the draws would take (PERFORMANCE.md).
  below = lambda draws: draws < jnp.uint32(threshold)
  keep = jnp.stack([below(words >> 16), below(words & (_LEVELS - 1))], axis=-1).reshape(-1)[:x.size].reshape(x.shape)
  kept = (x.astype(jnp.float32) * (_LEVELS / threshold)).astype(x.dtype)
  return jnp.where(keep, kept, jnp.zeros((), x.dtype))


class Dropout(nn.Module):
  """`dropout` with a key from the 'dropout' collection; the identity when `deterministic` or at rate 0."""
  rate: float

  @nn.compact
  def __call__(self, x: Array, *, deterministic: bool) -> Array:
    if deterministic or self.rate == 0.0:
      return x
    return dropout(x, self.rate, self.make_rng('dropout'))
