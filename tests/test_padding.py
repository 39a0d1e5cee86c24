"""Padding the encoder's positions to a length multiple (model.length_multiple, for cuDNN) changes how the
classifier computes, not what: the same logits, loss and gradients from the same parameters."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.listops import lra
from lra_posenc import encodings
from lra_posenc.listops import input_pipeline
from lra_posenc.listops import settings as listops_settings
from lra_posenc.models import attention
from lra_posenc.models.classifier import TransformerClassifier
from lra_posenc.models.transformer import attention_paths
from test_attention import fake_gpu

MAX_LENGTH = 13  # Tokens: 14 positions with the CLS token, padded to 16 (multiple 8); 13 to 32 (multiple 32).
REAL_LENGTHS = (13, 10, 6, 1)  # Per example; PAD tokens after.
# The two models multiply and sum arrays of other shapes (masked keys add exact zeros), so XLA may
# order the float32 sums differently: a few ulps, here and in every gradient.
RTOL, ATOL = 1e-5, 1e-6


def classifier(encoding: str, **model) -> TransformerClassifier:
  """A one-layer float32 ListOps classifier with `encoding`, its other `model` keys as given (every layer
  masks alike: the attention-weights test below checks two)."""
  config = lra.get_config('cpu')
  config.data.max_length = MAX_LENGTH
  config.model.update(dict(emb_dim=16, qkv_dim=16, mlp_dim=32, classifier_dim=16, num_heads=2, num_layers=1,
                           pos_encoding=encoding) | model)
  return listops_settings.create_model(config)


def batch() -> tuple[jax.Array, jax.Array]:
  """Tokens [4, MAX_LENGTH] with REAL_LENGTHS real tokens each, then PAD; and labels."""
  rng = np.random.default_rng(0)
  tokens = rng.integers(1, len(input_pipeline.VOCAB), (len(REAL_LENGTHS), MAX_LENGTH))
  tokens[np.arange(MAX_LENGTH)[None] >= np.array(REAL_LENGTHS)[:, None]] = input_pipeline.PAD_ID
  return jnp.asarray(tokens, jnp.int32), jnp.asarray(rng.integers(0, 10, len(REAL_LENGTHS)), jnp.int32)


def perturbed(params, scale: float = 0.3):
  """`params` plus scale x N(0, 1) noise: CoPE's table starts at zero, and would hide its term otherwise."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(1), len(leaves))
  return jax.tree.unflatten(tree, [x + scale * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])


def loss_logits_and_gradients(model: TransformerClassifier, params, tokens: jax.Array, labels: jax.Array, *,
                              train_pass: bool):
  """Mean cross-entropy, logits and the loss's gradients; a training pass draws from fixed keys."""
  rngs = {'dropout': jax.random.key(5), 'positions': jax.random.key(2)} if train_pass else {}

  def loss(p):
    logits = model.apply({'params': p}, tokens, train=train_pass, rngs=rngs)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=-1)
    return nll.mean(), logits

  (value, logits), gradients = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  return value, logits, gradients


def cases():
  """Every encoding as LRA pools ('cls') and with randomized positions; mean pooling, which reads every
  position, with 14 positions padded to 32, for one encoding of each kind and for the additive encodings
  placed after the encoder."""
  kinds = ('sinusoidal', 'rope', 'alibi', 'transformer_xl')  # Added to inputs, rotary, bias, content term.
  for name in encodings.REGISTRY:
    yield pytest.param(name, dict(pooling='cls', length_multiple=8), False, id=f'{name}-cls')
    # Both models draw the same 14 positions from [0, 40) ('positions' key fixed; every dropout rate is 0).
    yield pytest.param(name, dict(pooling='cls', length_multiple=8, randomized_positions=40), True,
                       id=f'{name}-randomized')
    if name in kinds:
      yield pytest.param(name, dict(pooling='mean', length_multiple=32), False, id=f'{name}-mean')
    if not encodings.acts_in_attention(name):
      yield pytest.param(name, dict(pooling='mean', length_multiple=32, pos_encoding_placement='after_encoder'),
                         False, id=f'{name}-after_encoder')


@pytest.mark.parametrize('encoding, model_keys, train_pass', list(cases()))
def test_padding_changes_neither_logits_nor_loss_nor_gradients(encoding, model_keys, train_pass):
  padded = classifier(encoding, **model_keys)
  plain = padded.clone(length_multiple=1)
  tokens, labels = batch()
  params = perturbed(plain.init({'params': jax.random.key(0)}, tokens, train=False)['params'])
  chex.assert_trees_all_equal_shapes_and_dtypes(
      jax.eval_shape(lambda: padded.init({'params': jax.random.key(0)}, tokens, train=False)['params']), params)
  plain_loss, plain_logits, plain_gradients = loss_logits_and_gradients(plain, params, tokens, labels,
                                                                        train_pass=train_pass)
  loss, logits, gradients = loss_logits_and_gradients(padded, params, tokens, labels, train_pass=train_pass)
  assert np.isfinite(plain_loss) and np.abs(plain_logits).max() > 0.1  # Neither NaN nor vacuously small.
  np.testing.assert_allclose(logits, plain_logits, rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(loss, plain_loss, rtol=RTOL, atol=ATOL)
  chex.assert_trees_all_close(gradients, plain_gradients, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize('pooling, multiple, padded_length', [('cls', 8, 16), ('mean', 32, 32)])
def test_the_padded_encoder_attends_over_the_padded_length_and_never_to_the_padding(pooling, multiple,
                                                                                     padded_length):
  model = classifier('alibi', pooling=pooling, length_multiple=multiple, num_layers=2)
  tokens, _ = batch()
  params = model.init({'params': jax.random.key(0)}, tokens, train=False)['params']
  _, state = model.apply({'params': params}, tokens, train=False, mutable=['intermediates'])
  for block in ('block_0', 'block_1'):
    (weights,) = state['intermediates']['encoder'][block]['MultiHeadAttention_0']['attention_weights']
    real = MAX_LENGTH + (pooling == 'cls')
    assert weights.shape == (len(REAL_LENGTHS), 2, padded_length, padded_length)
    np.testing.assert_array_equal(weights[:, :, :, real:], 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize('encoding', ['sinusoidal', 'alibi'])  # Keys padded, without and with a bias.
def test_the_fused_variant_pads_lra_listops_to_2048_positions_which_cudnn_can_train(monkeypatch, encoding):
  config = lra.get_config('fused')
  config.model.pos_encoding = encoding
  model = listops_settings.create_model(config)
  tokens = jnp.ones((2, config.data.max_length), jnp.int32)
  params = jax.eval_shape(lambda: model.init({'params': jax.random.key(0)}, tokens, train=False)['params'])
  calls, choose_path = [], attention.choose_path
  monkeypatch.setattr(attention, 'choose_path', lambda *args: calls.append(args[1]) or choose_path(*args))
  jax.eval_shape(lambda p: model.apply({'params': p}, tokens, train=True, rngs={
      'dropout': jax.random.key(0), 'positions': jax.random.key(1)}), params)  # What the model's layers ask.
  assert len(calls) == config.model.num_layers
  for call in calls:
    assert (call.query_length, call.key_length, call.training, call.padded) == (2048, 2048, True, True)
    assert attention.cudnn_obstacle(call, fake_gpu()) is None
  # What the run reports, before anything is traced.
  assert attention_paths(model.config, model.attention_calls(2000), device=fake_gpu()) == {
      'encoder self-attention': attention.AttentionPath('cudnn')}
  unpadded = model.clone(length_multiple=1)
  (path,) = attention_paths(unpadded.config, unpadded.attention_calls(2000), device=fake_gpu()).values()
  assert path.implementation == 'xla' and 'only at even lengths; this call attends 2001 queries to 2001 keys' in (
      path.reason)


def test_length_multiple_must_be_positive():
  with pytest.raises(ValueError, match=r'model.length_multiple=0 must be > 0'):
    classifier('none', length_multiple=0)
