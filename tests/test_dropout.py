"""Dropout from 16-bit draws: the rate, independence of the two draws one word serves, the expectation."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra_posenc.models.dropout import Dropout, dropout

SIZE = 1 << 20
# Rate 0.1 keeps 58982 of the 2^16 values of a 16-bit draw (round(0.9 x 2^16)), as the module says.
KEEP_AT_RATE_0_1 = 58982 / 65536


def dropped(rate: float, seed: int = 0, shape=(SIZE,)) -> np.ndarray:
  return np.asarray(dropout(jnp.ones(shape), rate, jax.random.PRNGKey(seed)) == 0)


@pytest.mark.parametrize('rate', [0.1, 0.3, 0.5])
def test_drops_each_element_at_the_rate(rate):
  fraction = dropped(rate).mean()
  sigma = np.sqrt(rate * (1 - rate) / SIZE)
  assert abs(fraction - rate) < 5 * sigma, (fraction, rate, sigma)


def test_neighbours_drawn_from_one_word_are_independent():
  rate = 0.3
  pairs = dropped(rate).reshape(-1, 2)  # Elements 2i and 2i + 1 take the two halves of one 32-bit word.
  both = (pairs[:, 0] & pairs[:, 1]).mean()
  sigma = np.sqrt(rate ** 2 * (1 - rate ** 2) / len(pairs))
  assert abs(both - rate ** 2) < 5 * sigma, (both, rate ** 2)
  # And no element repeats its neighbour more often than chance.
  agree = (pairs[:, 0] == pairs[:, 1]).mean()
  expected = rate ** 2 + (1 - rate) ** 2
  assert abs(agree - expected) < 5 * np.sqrt(expected * (1 - expected) / len(pairs))


@pytest.mark.parametrize('shape', [(7,), (3, 5, 9), (64, 33)])
def test_the_mask_layout_is_the_one_committed_runs_trained_with(shape):
  """Element 2i is kept when the high 16 bits of word i of `jax.random.bits(rng, ceil(n / 2))` are below
  (1 - rate) 2^16, element 2i + 1 when the low 16 bits are: any other layout would change every run."""
  rng, rate = jax.random.PRNGKey(3), 0.2
  size = int(np.prod(shape))
  words = np.asarray(jax.random.bits(rng, (-(-size // 2),), jnp.uint32))
  draws = np.stack([words >> 16, words & 0xFFFF], axis=-1).reshape(-1)[:size].reshape(shape)
  expected = draws < round((1 - rate) * 2 ** 16)
  np.testing.assert_array_equal(np.asarray(dropout(jnp.ones(shape), rate, rng)) != 0, expected)


def test_kept_elements_are_scaled_so_the_expectation_is_the_input():
  x = jax.random.normal(jax.random.PRNGKey(1), (SIZE,))
  out = np.asarray(dropout(x, 0.1, jax.random.PRNGKey(2)))
  kept = out != 0
  np.testing.assert_allclose(out[kept], np.asarray(x)[kept] / KEEP_AT_RATE_0_1, rtol=1e-6)
  # Averaged over masks, each element is its input: over many keys the mean of ones stays 1.
  means = [float(dropout(jnp.ones((4096,)), 0.5, jax.random.PRNGKey(k)).mean()) for k in range(64)]
  assert abs(np.mean(means) - 1.0) < 5 * np.sqrt(1.0 / (4096 * 64))


def test_bfloat16_inputs_are_scaled_without_bias():
  x = jax.random.uniform(jax.random.PRNGKey(6), (SIZE,), minval=1.0, maxval=2.0).astype(jnp.bfloat16)
  out = dropout(x, 0.1, jax.random.PRNGKey(7))
  assert out.dtype == jnp.bfloat16
  kept = np.asarray(out != 0)
  ratio = np.asarray(out, np.float32)[kept] / np.asarray(x, np.float32)[kept]
  # Each kept element is rounded once to bfloat16, up or down, so on average the scale is exact; a scale
  # rounded to bfloat16 itself (1.109375 for 1/0.9) would be 0.16% low in every element.
  assert abs(ratio.mean() * KEEP_AT_RATE_0_1 - 1) < 2e-4


def test_the_mask_depends_on_the_key_and_every_shape_works():
  assert (dropped(0.5, seed=3, shape=(3, 7)) == dropped(0.5, seed=3, shape=(3, 7))).all()
  assert (dropped(0.5, seed=3) != dropped(0.5, seed=4)).any()
  assert dropped(0.5, shape=(1,)).shape == (1,)  # An odd size uses half of its last word.


def test_gradient_is_the_mask_over_the_keep_probability():
  x, key = jnp.full((1000,), 2.0), jax.random.PRNGKey(5)
  gradient = jax.grad(lambda x: dropout(x, 0.2, key).sum())(x)
  np.testing.assert_allclose(gradient, dropout(jnp.ones_like(x), 0.2, key), rtol=1e-6)


def test_rates_zero_and_one_and_deterministic_mode():
  x = jnp.arange(1.0, 9.0)
  np.testing.assert_array_equal(dropout(x, 0.0, jax.random.PRNGKey(0)), x)
  np.testing.assert_array_equal(dropout(x, 1.0, jax.random.PRNGKey(0)), jnp.zeros_like(x))
  layer = Dropout(0.5)
  np.testing.assert_array_equal(layer.apply({}, x, deterministic=True), x)
  assert (layer.apply({}, x, deterministic=False, rngs={'dropout': jax.random.PRNGKey(0)}) == 0).any()
