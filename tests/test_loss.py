"""The chunked output layer and label-smoothed loss of translation against float64 NumPy oracles."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra_posenc.translation import loss

VOCAB, DIM = 53, 12


def inputs(scale: float = 1.0, shift: float = 0.0, bias: bool = True, seed: int = 0):
  """States [3, 5, d], table [V, d], bias [V] (or None), targets and weights [3, 5]: some tokens weigh 0
  (padding), some 2 or a fraction (eval rows), and row 0's targets are its argmax."""
  rng = np.random.default_rng(seed)
  states = (scale * rng.normal(size=(3, 5, DIM)) / np.sqrt(DIM)).astype(np.float32)
  table = rng.normal(size=(VOCAB, DIM)).astype(np.float32)
  bias_values = (rng.normal(size=VOCAB) + shift).astype(np.float32) if bias else None
  targets = rng.integers(0, VOCAB, (3, 5)).astype(np.int32)
  targets[0] = oracle_logits(states, table, bias_values)[0].argmax(-1)
  weights = np.ones((3, 5), np.float32)
  weights[1, 3:] = 0.0
  weights[2] = [2.0, 0.5, 1.0, 0.0, 1.0]
  return states, table, bias_values, targets, weights


def oracle_logits(states, table, bias):
  logits = np.asarray(states, np.float64) @ np.asarray(table, np.float64).T
  return logits if bias is None else logits + np.asarray(bias, np.float64)


def oracle(states, table, bias, targets, weights, label_smoothing):
  """Float64: weighted sums of KL(q || softmax(z)), -log p_target and argmax == target, and the gradient of
  the first with respect to states, table and bias, from d KL / dz = softmax(z) - q."""
  z = oracle_logits(states, table, bias)
  log_p = z - z.max(-1, keepdims=True)
  log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
  one_hot = np.eye(VOCAB)[targets]
  soft = one_hot * (1 - label_smoothing) + (1 - one_hot) * label_smoothing / (VOCAB - 1)
  kl = np.sum(np.where(soft > 0, soft * (np.log(np.where(soft > 0, soft, 1.0)) - log_p), 0.0), -1)
  nll = -np.take_along_axis(log_p, targets[..., None], -1)[..., 0]
  correct = z.argmax(-1) == targets
  w = np.asarray(weights, np.float64)
  logit_gradient = (w[..., None] * (np.exp(log_p) - soft)).reshape(-1, VOCAB)
  flat_states = np.asarray(states, np.float64).reshape(-1, DIM)
  gradients = ((logit_gradient @ np.asarray(table, np.float64)).reshape(states.shape),
               logit_gradient.T @ flat_states, logit_gradient.sum(0))
  return (kl * w).sum(), (nll * w).sum(), (correct * w).sum(), gradients


def sums_and_gradients(states, table, bias, targets, weights, label_smoothing, chunk_tokens, factor=1.0):
  """The sums, and the gradients of `factor` x the loss sum (the trainer divides it by the token count)."""
  def loss_sum(states, table, bias):
    sums = loss.token_sums(states, table, bias, targets, weights, label_smoothing=label_smoothing,
                           chunk_tokens=chunk_tokens)
    return factor * sums.loss, sums
  (_, sums), gradients = jax.jit(jax.value_and_grad(loss_sum, argnums=(0, 1, 2), has_aux=True))(states, table, bias)
  return sums, gradients


@pytest.mark.parametrize('label_smoothing, scale, shift, bias, chunk_tokens', [
    (0.1, 1.0, 0.0, True, 4), (0.1, 60.0, 0.0, False, 4), (0.0, 5.0, 0.0, True, 6), (0.1, 5.0, 1e4, True, 15),
    (0.2, 3.0, 0.0, False, 1)])
def test_token_sums_and_gradients_against_a_float64_oracle(label_smoothing, scale, shift, bias, chunk_tokens):
  """Chunks of 4 and 6 leave a padded last chunk of the 15 tokens; logits up to ~60 and shifted by 1e4 stay
  exact (float32 sums of 15 terms: 1e-5 relative; at a shift of 1e4 float32 logits keep ~6e-4, and the
  softmax with them)."""
  args = inputs(scale, shift, bias)
  factor = 1 / 13  # A cotangent other than 1, as the mean over a batch's tokens sends back.
  sums, gradients = sums_and_gradients(*args, label_smoothing, chunk_tokens, factor)
  *want, want_gradients = oracle(*args, label_smoothing)
  want_gradients = [factor * g for g in want_gradients]
  tolerance = 1e-5 if shift == 0 else 2e-3
  np.testing.assert_allclose(sums.loss, want[0], rtol=tolerance, atol=tolerance)
  np.testing.assert_allclose(sums.nll, want[1], rtol=tolerance, atol=tolerance)
  assert float(sums.correct) == want[2]
  for got, expected in zip(gradients, want_gradients):
    if got is None:
      assert not bias
      continue
    scale_of = np.abs(expected).max()
    np.testing.assert_allclose(got, expected, rtol=10 * tolerance, atol=tolerance * scale_of)


def test_sums_and_gradients_do_not_depend_on_the_chunk_size():
  """One chunk, chunks that divide the 15 tokens and chunks that do not: one function (float32 sums in
  another order)."""
  args = inputs(scale=4.0)
  reference = sums_and_gradients(*args, 0.1, 15)
  for chunk_tokens in (1, 2, 5, 7, 64):
    got = sums_and_gradients(*args, 0.1, chunk_tokens)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-6), got, reference)


def test_undifferentiated_sums_equal_the_differentiated_ones():
  """Evaluation takes the forward-only path (no gradient products), training the one that forms gradients."""
  states, table, bias, targets, weights = inputs(scale=3.0)
  plain = jax.jit(lambda *a: loss.token_sums(*a, targets, weights, label_smoothing=0.1, chunk_tokens=4))
  differentiated, _ = sums_and_gradients(states, table, bias, targets, weights, 0.1, 4)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), plain(states, table, bias), differentiated)


def test_only_the_loss_carries_a_gradient():
  states, table, bias, targets, weights = inputs()
  nll_gradient = jax.grad(lambda s: loss.token_sums(s, table, bias, targets, weights, label_smoothing=0.1,
                                                    chunk_tokens=4).nll)(states)
  np.testing.assert_array_equal(nll_gradient, 0.0)


def test_accuracy_counts_the_first_of_tied_logits_as_greedy_decoding_does():
  table = np.zeros((8, 2), np.float32)
  table[3] = table[5] = [1.0, 0.0]  # Tokens 3 and 5 tie.
  states = np.ones((1, 2, 2), np.float32)
  # Weights 1 and 2: the first of ties counts 1, the last would count 2, any tie 3.
  sums = loss.token_sums(states, table, None, np.array([[3, 5]]), np.array([[1.0, 2.0]], np.float32),
                         label_smoothing=0.1, chunk_tokens=1)
  assert float(sums.correct) == 1.0


def test_a_non_finite_state_makes_the_loss_non_finite():
  """The trainer's guard reads the loss: a NaN must not vanish into the chunk sums."""
  states, table, bias, targets, weights = inputs()
  states[2, 0, 0] = np.nan
  sums = loss.token_sums(states, table, bias, targets, weights, label_smoothing=0.1, chunk_tokens=4)
  assert not np.isfinite(float(sums.loss))


def test_bfloat16_products_follow_float32_at_bfloat16_precision():
  states, table, bias, targets, weights = inputs(scale=3.0)
  full = sums_and_gradients(states, table, bias, targets, weights, 0.1, 4)
  half = sums_and_gradients(jnp.asarray(states, jnp.bfloat16), jnp.asarray(table, jnp.bfloat16), bias, targets,
                            weights, 0.1, 4)
  assert [g.dtype for g in half[1]] == [jnp.bfloat16, jnp.bfloat16, jnp.float32]
  # bfloat16 keeps 8 bits of mantissa: ~0.4% per product, relative to each array's largest entry.
  np.testing.assert_allclose(half[0].loss, full[0].loss, rtol=2e-2)
  for got, want in zip(half[1], full[1]):
    np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=2e-2 * float(np.abs(want).max()))


def test_mismatched_shapes_are_refused():
  states, table, bias, targets, weights = inputs()
  with pytest.raises(ValueError, match=r'need targets and weights of shape \(3, 5\)'):
    loss.token_sums(states, table, bias, targets[:, :4], weights[:, :4], label_smoothing=0.1, chunk_tokens=4)
