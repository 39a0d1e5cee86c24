"""KERPLE (Chi et al. 2022): attention biases from conditionally positive definite kernels of distance.

Log kernel: -p log(1 + a |i - j|); power kernel: -a |i - j|^p with p in (0, 2]. p and a are
learned per head. As in the paper's code, they start uniform in (0, 2) (p) and (0, 1) (a)
and are kept at or above 1e-2 (p at most 2 for the power kernel). The paper's code clamps the
stored parameters after each update; here the forward pass reads them clamped, with the
gradient passed straight through the clamp, so a parameter pushed past a bound returns as
soon as its gradient turns. The distance is |i - j| in the encoder and the decoder alike
(a causal decoder attends j <= i only, where it is the paper's i - j).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from lra_posenc.encodings import base

SMALLEST = 1e-2  # The paper's code's lower bound of both parameters.


def clamp_straight_through(x: base.Array, low: float, high: float | None = None) -> base.Array:
  """`x` clamped to [low, high] in value, with the gradient of the identity."""
  return x + jax.lax.stop_gradient(jnp.clip(x, low, high) - x)


def uniform(high: float) -> nn.initializers.Initializer:
  return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, 0.0, high)


class KerpleEncoding(base.PositionalEncoding):
  """A per-head kernel of the distance |i - j| with learned positive `power` and `scale`."""

  max_power = None  # The power kernel bounds p by 2; the log kernel does not.

  def kernel(self, distance: base.Array, power: base.Array, scale: base.Array) -> base.Array:
    raise NotImplementedError

  @nn.compact
  def attention_terms(self, query_positions: base.Array, key_positions: base.Array, *,
                      causal: bool) -> base.AttentionTerms:
    del causal
    power = clamp_straight_through(self.param('power', uniform(2.0), (self.num_heads,)), SMALLEST, self.max_power)
    scale = clamp_straight_through(self.param('scale', uniform(1.0), (self.num_heads,)), SMALLEST)
    distance = base.absolute_distance(query_positions, key_positions)
    return base.AttentionTerms(bias=self.kernel(distance, power[:, None, None], scale[:, None, None]))


@base.register('kerple_log')
class KerpleLogEncoding(KerpleEncoding):

  def kernel(self, distance: base.Array, power: base.Array, scale: base.Array) -> base.Array:
    return -power * jnp.log1p(scale * distance)


@base.register('kerple_power')
class KerplePowerEncoding(KerpleEncoding):
  max_power = 2.0

  def kernel(self, distance: base.Array, power: base.Array, scale: base.Array) -> base.Array:
    # 0 ** p is 0, but its gradient in p is 0 * log 0: the base is 1 there, and the term masked.
    nonzero = distance > 0
    return -scale * jnp.where(nonzero, jnp.where(nonzero, distance, 1.0) ** power, 0.0)
