"""Positional encodings against float64 oracles and the invariances they promise."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from lra_posenc import encodings
from lra_posenc.encodings import t5
from lra_posenc.encodings.alibi import alibi_slopes
from lra_posenc.encodings.chebyshev import chebyshev_table
from lra_posenc.encodings.legendre import legendre_table
from lra_posenc.encodings.sinusoidal import sinusoidal_table
from lra_posenc.models import attention
from lra_posenc.models.attention import broadcast_over_batch
from lra_posenc.models.classifier import TransformerClassifier, randomized_positions
from lra_posenc.models.transformer import Encoder, TransformerConfig

# The acceptance bound on every table entry: float32 keeps ~6e-8 relative error for
# values in [-1, 1], so 1e-5 leaves room only for a genuinely accurate recurrence.
TABLE_TOLERANCE = 1e-5
# The encodings whose attention terms are a logit bias, as the registry's encodings say by tracing.
BIASES = [name for name in encodings.REGISTRY if encodings.default_terms(name).bias is not None]


@pytest.mark.parametrize('length,dim,max_len', [(4096, 1024, 4096), (2048, 512, 2048), (100, 7, 130), (2, 1, 2)])
def test_chebyshev_matches_closed_form(length, dim, max_len):
  x = 2.0 * np.arange(length) / (max_len - 1) - 1.0
  oracle = np.cos(np.arange(dim)[None, :] * np.arccos(np.clip(x, -1, 1))[:, None])
  table = chebyshev_table(length, dim, max_len)
  assert table.dtype == np.float32 and table.shape == (length, dim)
  np.testing.assert_array_less(np.abs(table - oracle).max(), TABLE_TOLERANCE)


def test_chebyshev_position_offset_shifts_grid():
  shifted = chebyshev_table(10, 16, 64, position_offset=3)
  np.testing.assert_allclose(shifted, chebyshev_table(13, 16, 64)[3:], atol=1e-7)


@pytest.mark.parametrize('length,dim,row_stride', [(4096, 1024, 9), (2048, 512, 5), (300, 64, 1), (50, 2, 1)])
def test_legendre_matches_scipy(length, dim, row_stride):
  # Every order up to 300 and a strided sample (plus the last) of the longer tables:
  # scipy needs ~20 s for the full 4096 x 1024 oracle.
  rows = np.unique(np.append(np.arange(0, length, row_stride), length - 1))
  x = -1.0 + 2.0 * np.arange(dim) / (dim - 1)
  oracle = special.eval_legendre(rows[:, None], x[None, :])
  table = legendre_table(length, dim)
  assert table.dtype == np.float32 and table.shape == (length, dim)
  np.testing.assert_array_less(np.abs(table[rows] - oracle).max(), TABLE_TOLERANCE)


def test_legendre_open_grid_and_offset():
  dim = 10
  x = -1.0 + 2.0 * np.arange(dim) / dim
  oracle = special.eval_legendre(np.arange(5, 25)[:, None], x[None, :])
  table = legendre_table(20, dim, grid='open', position_offset=5)
  np.testing.assert_array_less(np.abs(table - oracle).max(), TABLE_TOLERANCE)


def test_sinusoidal_matches_float64_and_interleaves():
  length, dim = 4096, 1024
  angles = np.arange(length)[:, None] / 10000.0 ** (np.arange(0, dim, 2) / dim)[None, :]
  table = sinusoidal_table(length, dim)
  np.testing.assert_array_less(np.abs(table[:, 0::2] - np.sin(angles)).max(), TABLE_TOLERANCE)
  np.testing.assert_array_less(np.abs(table[:, 1::2] - np.cos(angles)).max(), TABLE_TOLERANCE)


def test_tables_are_read_only_and_cached():
  table = legendre_table(64, 16)
  assert legendre_table(64, 16) is table
  with pytest.raises(ValueError):
    table[0, 0] = 1.0


def test_chebyshev_refuses_positions_beyond_max_len():
  with pytest.raises(encodings.CannotExtrapolate, match='cannot extrapolate'):
    chebyshev_table(65, 8, 64)


def test_rope_scores_depend_only_on_relative_offset():
  module = encodings.create('rope', encodings.REGISTRY['rope'].Options(), max_len=64, dim=32, num_heads=2,
                            head_dim=16)
  rng_q, rng_k = jax.random.split(jax.random.PRNGKey(0))
  q = jax.random.normal(rng_q, (1, 1, 2, 16))
  k = jax.random.normal(rng_k, (1, 1, 2, 16))

  def score(q_position, k_position):
    terms = module.apply({}, jnp.array([[q_position]]), jnp.array([[k_position]]), causal=False,
                         method='attention_terms')
    return jnp.einsum('bqhd,bkhd->h', terms.query_rotary.apply(q), terms.key_rotary.apply(k))

  reference = score(3, 10)
  for shift in (1, 17, 500, 4000):
    # float32 angles of positions ~4000 carry ~2e-4 rad of error; scores are O(10).
    np.testing.assert_allclose(score(3 + shift, 10 + shift), reference, atol=5e-3)
  assert not np.allclose(score(3, 11), reference, atol=1e-2)


def test_alibi_slopes_follow_the_paper():
  np.testing.assert_allclose(alibi_slopes(8), [2.0 ** -(i + 1) for i in range(8)])
  # 12 heads: the 8-head slopes, then every other slope of the 16-head sequence.
  expected = [2.0 ** -(i + 1) for i in range(8)] + [2.0 ** -(0.5 + i) for i in range(4)]
  np.testing.assert_allclose(alibi_slopes(12), expected, rtol=1e-6)


def test_alibi_bias_is_symmetric_distance_penalty():
  module = encodings.create('alibi', encodings.REGISTRY['alibi'].Options(), max_len=8, dim=8, num_heads=8,
                            head_dim=1)
  positions = jnp.arange(6)[None]
  bias = module.apply({}, positions, positions, causal=False, method='attention_terms').bias
  np.testing.assert_allclose(bias[0, 0], -0.5 * np.abs(np.arange(6)[:, None] - np.arange(6)[None, :]))


def _t5_bucket(relative: int, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> int:
  """T5's bucket of key - query (Raffel et al.; Mesh TensorFlow's _relative_position_bucket): half the buckets
  for keys after the query when bidirectional, the first half of a side exact, then logarithmic up to
  max_distance and capped there; causal: only keys at or before the query, by their distance."""
  offset = 0
  if bidirectional:
    num_buckets //= 2
    offset, distance = (num_buckets if relative > 0 else 0), abs(relative)
  else:
    distance = max(-relative, 0)
  exact = num_buckets // 2
  if distance < exact:
    return offset + distance
  logarithmic = exact + math.floor(math.log(distance / exact) / math.log(max_distance / exact) * (num_buckets - exact))
  return offset + min(logarithmic, num_buckets - 1)


def test_t5_buckets_match_the_paper_bidirectional_and_causal():
  relative = np.arange(-300, 301)
  for bidirectional in (True, False):
    ours = t5.relative_position_bucket(jnp.asarray(relative), bidirectional=bidirectional, num_buckets=32,
                                       max_distance=128)
    np.testing.assert_array_equal(ours, [_t5_bucket(int(r), bidirectional=bidirectional) for r in relative])


def _small_transformer(name: str, *, max_len: int, num_layers: int) -> TransformerConfig:
  options = encodings.resolve_options(name, encodings.options_config())
  return TransformerConfig(emb_dim=16, num_heads=2, num_layers=num_layers, qkv_dim=16, mlp_dim=32, dropout_rate=0.0,
                           attention_dropout_rate=0.0, pos_encoding=name, pos_encoding_options=options,
                           max_len=max_len)


def _perturbed(params, scale: float):
  """`params` plus scale x N(0, 1) noise: parameters away from their initialisation."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
  return jax.tree.unflatten(tree, [x + scale * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])


def _classifier(name: str, pooling: str, max_len: int = 16) -> TransformerClassifier:
  config = _small_transformer(name, max_len=max_len + (pooling == 'cls'), num_layers=2)
  return TransformerClassifier(config, vocab_size=16, num_classes=10, pooling=pooling, classifier_dim=16)


# Mean pooling reads every real position's output, so it checks each encoding's masking fully; the
# CLS token's shift of every position is checked for two of them.
@pytest.mark.parametrize('name, pooling', [(name, 'mean') for name in encodings.REGISTRY]
                         + [('sinusoidal', 'cls'), ('alibi', 'cls')])
def test_every_encoding_ignores_padding(name, pooling):
  model = _classifier(name, pooling)
  tokens = jax.random.randint(jax.random.PRNGKey(1), (3, 9), 1, 16)
  params = model.init({'params': jax.random.PRNGKey(0)}, tokens, train=False)['params']
  padded = jnp.concatenate([tokens, jnp.zeros((3, 7), tokens.dtype)], axis=1)
  logits = model.apply({'params': params}, tokens, train=False)
  np.testing.assert_allclose(model.apply({'params': params}, padded, train=False), logits, atol=1e-5)
  assert np.isfinite(logits).all()


@pytest.mark.parametrize('name', [name for name in encodings.REGISTRY if name != 'none'])
def test_every_encoding_makes_order_matter(name):
  model = _classifier(name, 'mean')
  tokens = jnp.arange(1, 9)[None]
  params = model.init({'params': jax.random.PRNGKey(0)}, tokens, train=False)['params']
  params = _perturbed(params, 0.5)  # Not initial ones: CoPE's table starts at zero, FIRE's bias nearly flat.
  logits = model.apply({'params': params}, tokens, train=False)
  swapped = tokens[:, jnp.array([2, 1, 0, 3, 4, 5, 6, 7])]
  assert not np.allclose(model.apply({'params': params}, swapped, train=False), logits, atol=1e-4)


def test_symmetric_alibi_cannot_see_reversal_under_mean_pooling():
  # Reversal maps |i - j| to itself, so a bidirectional ALiBi encoder with mean pooling
  # scores a sequence and its reverse alike: a fact to keep in mind when comparing.
  model = _classifier('alibi', 'mean')
  tokens = jnp.arange(1, 9)[None]
  params = model.init({'params': jax.random.PRNGKey(0)}, tokens, train=False)['params']
  np.testing.assert_allclose(model.apply({'params': params}, tokens[:, ::-1], train=False),
                             model.apply({'params': params}, tokens, train=False), atol=1e-5)


def test_tables_are_constants_not_recomputed_in_the_step():
  model = _classifier('legendre', 'cls')
  tokens = jnp.ones((2, 16), jnp.int32)
  params = model.init({'params': jax.random.PRNGKey(0)}, tokens, train=False)['params']
  constants = jax.make_jaxpr(lambda p: model.apply({'params': p}, tokens, train=False))(params).consts
  table = legendre_table(model.config.max_len, model.config.emb_dim)
  assert any(np.shape(c) == table.shape and np.array_equal(c, table) for c in constants)


@pytest.mark.parametrize('name', ['learned', 'chebyshev'])
def test_non_extrapolating_encodings_reject_long_inputs(name):
  model = _classifier(name, 'mean', max_len=8)
  with pytest.raises(encodings.CannotExtrapolate, match='cannot extrapolate'):
    model.init({'params': jax.random.PRNGKey(0)}, jnp.ones((1, 9), jnp.int32), train=False)


def test_explicit_positions_read_nan_beyond_the_table():
  table = sinusoidal_table(4, 2)
  rows = encodings.base.lookup(table, jnp.array([[0, 3, 4]]))
  assert np.isfinite(rows[0, :2]).all() and np.isnan(rows[0, 2]).all()


def test_registry_errors_name_key_and_choices():
  with pytest.raises(ValueError, match=r"model.pos_encoding='fourier'.*'legendre'"):
    encodings.resolve_options('fourier', encodings.options_config())
  options = encodings.options_config()
  options.t5.num_buckets = 64
  with pytest.raises(ValueError, match=r'pos_encoding_options.t5.num_buckets is set but'):
    encodings.resolve_options('rope', options)


@pytest.mark.parametrize('name', list(encodings.REGISTRY))
def test_explicit_positions_equal_the_default_ones(name):
  encoder = Encoder(_small_transformer(name, max_len=12, num_layers=1))
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 12, 16))
  valid = jnp.ones((2, 12), bool)
  params = encoder.init(jax.random.PRNGKey(1), x, valid=valid, deterministic=True)
  explicit = jnp.broadcast_to(jnp.arange(12), (2, 12))
  np.testing.assert_allclose(encoder.apply(params, x, valid=valid, positions=explicit, deterministic=True),
                             encoder.apply(params, x, valid=valid, deterministic=True), atol=1e-6)


def test_shared_bias_gradient_is_the_batch_sum():
  bias = jax.random.normal(jax.random.PRNGKey(0), (1, 2, 5, 5))
  weights = jax.random.normal(jax.random.PRNGKey(1), (3, 2, 5, 5))
  through_product = jax.grad(lambda b: (broadcast_over_batch(b, 3) * weights).sum())(bias)
  through_broadcast = jax.grad(lambda b: (jnp.broadcast_to(b, (3, 2, 5, 5)) * weights).sum())(bias)
  np.testing.assert_allclose(through_product, through_broadcast, rtol=1e-6)
  np.testing.assert_array_equal(broadcast_over_batch(bias, 3)[2], bias[0])


@pytest.mark.slow
def test_t5_gradients_match_a_plain_broadcast_in_the_model(monkeypatch):
  tokens = jnp.asarray(np.random.default_rng(0).integers(1, 16, (3, 16)))
  model = _classifier('t5', 'mean')
  params = model.init(jax.random.PRNGKey(0), tokens, train=False)['params']
  loss = lambda p: model.apply({'params': p}, tokens, train=False).sum()
  ours = jax.grad(loss)(params)
  monkeypatch.setattr(attention, 'broadcast_over_batch', lambda b, n: jnp.broadcast_to(b, (n,) + b.shape[1:]))
  plain = jax.grad(loss)(params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), ours, plain)


@pytest.mark.parametrize('name, option, value, message', [
    ('rope', 'base', -1.0, r'rope.base=-1.0 must be > 1 \(wavelengths grow from 2 pi to 2 pi base\)'),
    ('sinusoidal', 'base', 1.0, r'sinusoidal.base=1.0 must be > 1'),
    ('learned', 'init_std', -0.1, r'learned.init_std=-0.1 must be >= 0'),
    ('t5', 'num_buckets', 7, r't5.num_buckets=7 must be even and >= 4'),
    ('t5', 'max_distance', 16, r't5.max_distance=16 must be > 16'),
    ('t5', 'max_distance', -1, r"t5.max_distance=-1 must be > 16 .*or 0: the model's max_len"),
    ('chebyshev', 'max_len', 1, r"chebyshev.max_len=1 must be >= 2 \(or 0: the model's max_len\)"),
    ('chebyshev', 'position_offset', -1, r'chebyshev.position_offset=-1 must be >= 0'),
    ('legendre', 'position_offset', -2, r'legendre.position_offset=-2 must be >= 0 \(a polynomial order\)'),
    ('legendre', 'scale', 0.0, r'legendre.scale=0.0 must be > 0'),
    ('rope', 'fraction', 1.5, r'rope.fraction=1.5 must be > 0 and <= 1'),
    ('rope', 'interpolation_factor', 0.5, r'rope.interpolation_factor=0.5 must be >= 1'),
    ('rope', 'ntk_factor', 0.0, r'rope.ntk_factor=0.0 must be >= 1'),
    ('fire', 'init_threshold', -1.0, r"fire.init_threshold=-1.0 must be > 0 \(or 0: a quarter of the model's max_len\)"),
    ('fire', 'mlp_width', 0, r'fire.mlp_width=0 must be >= 1'),
    ('dynamic_bias', 'depth', 0, r'dynamic_bias.depth=0 must be >= 1'),
])
def test_option_values_out_of_range_fail_at_config_time_naming_the_key(name, option, value, message):
  options = encodings.options_config()
  options[name][option] = value
  with pytest.raises(ValueError, match='^model.pos_encoding_options.' + message):
    encodings.resolve_options(name, options)


# The bias encodings added from the field's comparisons, against float64 evaluations of their papers' formulas.

def _bias(name: str, query_positions, key_positions, *, num_heads: int = 3, dim: int = 24, params=None,
          causal: bool = False, **options):
  """The bias of encoding `name` with `params` (by default its initial ones, perturbed), and those params."""
  module = encodings.create(name, encodings.REGISTRY[name].Options(**options), max_len=16, dim=dim,
                            num_heads=num_heads, head_dim=dim // num_heads)
  query_positions, key_positions = jnp.asarray(query_positions)[None], jnp.asarray(key_positions)[None]
  if params is None:
    initial = module.init(jax.random.PRNGKey(0), query_positions, key_positions, causal=causal,
                          method='attention_terms').get('params', {})
    params = _perturbed(initial, 0.1)
  bias = module.apply({'params': params}, query_positions, key_positions, causal=causal, method='attention_terms').bias
  return np.asarray(bias[0], np.float64), jax.tree.map(lambda x: np.asarray(x, np.float64), params)


# Sizes no code here was written for: 7 queries against 11 keys at offsets, with distances 0 and beyond 512.
QUERIES = np.array([0, 1, 5, 9, 40, 600, 601])
KEYS = np.array([0, 2, 3, 5, 8, 13, 21, 34, 55, 89, 1000])


@pytest.mark.parametrize('name', ['kerple_log', 'kerple_power'])
def test_kerple_biases_match_the_paper(name):
  # Per head: p and a inside their bounds, and below them (read at the bound: 1e-2, and p at most 2).
  params = {'power': jnp.array([0.7, 1e-4, 3.5]), 'scale': jnp.array([0.3, 2.0, -1.0])}
  bias, _ = _bias(name, QUERIES, KEYS, params=params)
  p = np.array([0.7, 1e-2, 3.5 if name == 'kerple_log' else 2.0])[:, None, None]
  a = np.array([0.3, 2.0, 1e-2])[:, None, None]
  distance = np.abs(QUERIES[:, None] - KEYS[None, :]).astype(np.float64)
  expected = -p * np.log(1 + a * distance) if name == 'kerple_log' else -a * distance ** p
  np.testing.assert_allclose(bias, expected, rtol=1e-5, atol=1e-5)


def test_kerple_clamps_pass_the_gradient_and_the_power_kernel_is_differentiable_at_distance_zero():
  module = encodings.create('kerple_power', encodings.REGISTRY['kerple_power'].Options(), max_len=8, dim=8,
                            num_heads=2, head_dim=4)
  positions = jnp.arange(5)[None]
  params = {'power': jnp.array([1.0, -0.5]), 'scale': jnp.array([0.5, 0.5])}
  grads = jax.grad(lambda p: module.apply({'params': p}, positions, positions, causal=False,
                                          method='attention_terms').bias.sum())(params)
  assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))
  assert (np.asarray(grads['power']) != 0).all()  # Also for the head whose p is read at its bound.


def test_fire_matches_the_paper_with_the_threshold_reached_and_not():
  # L = 512 * 0.02 = 10.24: queries below it and far beyond it.
  initial = _bias('fire', QUERIES, KEYS, init_threshold=512.0)[1]
  params = initial | {'c': np.float64(0.3), 'threshold_multiplier': np.float64(0.02)}
  bias, params = _bias('fire', QUERIES, KEYS, params=jax.tree.map(jnp.asarray, params), init_threshold=512.0)
  psi = lambda x: np.log(0.3 * x + 1)
  distance = np.abs(QUERIES[:, None] - KEYS[None, :]).astype(np.float64)
  normalized = psi(distance) / psi(np.maximum(512 * 0.02, QUERIES.astype(np.float64)))[:, None]
  hidden = np.maximum(normalized[..., None] * params['hidden']['kernel'][0] + params['hidden']['bias'], 0)
  expected = (hidden @ params['output']['kernel'] + params['output']['bias']).transpose(2, 0, 1)
  np.testing.assert_allclose(bias, expected, rtol=1e-4, atol=1e-5)


def test_dynamic_bias_matches_an_mlp_of_the_signed_log_distance():
  bias, params = _bias('dynamic_bias', QUERIES, KEYS, width=5, depth=2)
  relative = (QUERIES[:, None] - KEYS[None, :]).astype(np.float64)
  x = (np.sign(relative) * np.log(1 + np.abs(relative)))[..., None]
  for layer in ('hidden_0', 'hidden_1'):
    x = x @ params[layer]['kernel'] + params[layer]['bias']
    x = x / (1 + np.exp(-x))  # SiLU.
  expected = (x @ params['output']['kernel'] + params['output']['bias']).transpose(2, 0, 1)
  np.testing.assert_allclose(bias, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('name', BIASES)
@pytest.mark.parametrize('causal', [False, True])
def test_relative_biases_are_the_same_when_every_position_shifts(name, causal):
  # FIRE is relative while every query position is below its threshold L (set at 512 here).
  options = {'init_threshold': 512.0} if name == 'fire' else {}
  positions = np.arange(9)
  bias, params = _bias(name, positions, positions, causal=causal, **options)
  for shift in (1, 37, 400):
    shifted, _ = _bias(name, positions + shift, positions + shift, causal=causal, params=params, **options)
    np.testing.assert_allclose(shifted, bias, rtol=1e-5, atol=1e-5)


def test_fire_is_not_relative_past_its_threshold():
  positions = np.arange(9)
  bias, params = _bias('fire', positions + 600, positions + 600, init_threshold=512.0)
  farther, _ = _bias('fire', positions + 5000, positions + 5000, params=params, init_threshold=512.0)
  assert not np.allclose(farther, bias, atol=1e-4)  # psi(max(L, i)) grows with i: distances shrink.


@pytest.mark.parametrize('name', BIASES)
def test_relative_biases_extrapolate_far_beyond_max_len_without_reading_outside_a_table(name):
  positions = np.arange(0, 40000, 997)  # max_len is 16.
  bias, _ = _bias(name, positions, positions)
  assert np.isfinite(bias).all()


def test_learned_alibi_slopes_start_at_the_papers_and_train():
  module = encodings.create('alibi', encodings.REGISTRY['alibi'].Options(learned_slopes=True), max_len=8, dim=8,
                            num_heads=4, head_dim=2)
  positions = jnp.arange(6)[None]
  variables = module.init(jax.random.PRNGKey(0), positions, positions, causal=False, method='attention_terms')
  fixed = encodings.create('alibi', encodings.REGISTRY['alibi'].Options(), max_len=8, dim=8, num_heads=4, head_dim=2)
  np.testing.assert_allclose(
      module.apply(variables, positions, positions, causal=False, method='attention_terms').bias,
      fixed.apply({}, positions, positions, causal=False, method='attention_terms').bias, rtol=1e-6)
  grads = jax.grad(lambda v: module.apply(v, positions, positions, causal=False,
                                          method='attention_terms').bias.sum())(variables)
  assert (np.asarray(grads['params']['log_slopes']) < 0).all()  # Steeper slopes lower every off-diagonal bias.


def _rope_terms(positions, head_dim: int = 16, max_len: int = 64, **options):
  module = encodings.create('rope', encodings.REGISTRY['rope'].Options(**options), max_len=max_len, dim=2 * head_dim,
                            num_heads=2, head_dim=head_dim)
  positions = jnp.asarray([positions])
  return module.apply({}, positions, positions, causal=False, method='attention_terms').query_rotary


def test_partial_rope_turns_only_its_fraction_and_keeps_scores_relative():
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 3, 2, 16))
  rotary = _rope_terms([0, 7, 300], fraction=0.5)
  rotated = rotary.apply(x)
  np.testing.assert_array_equal(rotated[..., 8:], x[..., 8:])
  assert not np.allclose(rotated[:, 1:, :, :8], x[:, 1:, :, :8])
  np.testing.assert_allclose(rotated[:, 0], x[:, 0], rtol=1e-6)  # Position 0 does not turn.
  q, k = jax.random.normal(jax.random.PRNGKey(1), (2, 1, 1, 2, 16))
  score = lambda i, j: jnp.einsum('bqhd,bkhd->h', _rope_terms([i], fraction=0.5).apply(q),
                                  _rope_terms([j], fraction=0.5).apply(k))
  np.testing.assert_allclose(score(3 + 50, 10 + 50), score(3, 10), rtol=1e-4, atol=1e-4)


def test_rope_interpolation_and_ntk_scaling_follow_their_definitions():
  head_dim, factor = 16, 4.0
  plain = _rope_terms([0, 3, 12], head_dim)
  interpolated = _rope_terms([0, 12, 48], head_dim, interpolation_factor=factor)
  np.testing.assert_allclose(interpolated.sin, plain.sin, rtol=1e-5, atol=1e-6)  # Position p x 4 turns as p did.
  # NTK: base 10000 * 4^(16/14); the angle of pair k at position p is p * base^(-2k/16), in float64.
  ntk = _rope_terms([1], head_dim, ntk_factor=factor)
  base = 10000.0 * factor ** (head_dim / (head_dim - 2))
  angles = base ** -(np.arange(0, head_dim, 2) / head_dim)
  np.testing.assert_allclose(np.arctan2(ntk.sin, ntk.cos)[0, 0, 0], angles, rtol=1e-5)
  assert angles[0] == 1.0 and np.isclose(angles[-1], (10000.0 ** -(14 / 16)) / factor)  # Slowest stretched x4.


def _paper_rope_score(q, k, n, m, frequencies, scale: float = 1.0) -> float:
  """float64 q_n . k_m with pair i = (x_i, x_{i + d/2}) turned by position x frequencies[i] and scaled."""
  half = len(frequencies)
  def turn(x, position):
    angle = position * frequencies
    return np.concatenate([x[:half] * np.cos(angle) - x[half:] * np.sin(angle),
                           x[half:] * np.cos(angle) + x[:half] * np.sin(angle)]) * scale
  return float(turn(q, n) @ turn(k, m))


def _rope_score(q, k, n, m, head_dim, max_len: int = 64, **options) -> float:
  turn = lambda x, p: _rope_terms([p], head_dim, max_len, **options).apply(jnp.asarray(x, jnp.float32)[None, None, None])
  return float(jnp.sum(turn(q, n) * turn(k, m)))


@pytest.mark.parametrize('factor', [2.0, 16.0])
def test_yarn_follows_the_paper(factor):
  # Peng et al. 2024, eqs. 17-21 and section 3.4: theta_d = b^(-2d/|D|), lambda_d = 2 pi / theta_d, r = L / lambda_d,
  # gamma(r) = 0 below alpha = 1, 1 above beta = 32, linear between; h = (1 - gamma) theta / s + gamma theta; both
  # sides scaled by sqrt(1/t) = 0.1 ln s + 1. L = 1024 (the model's max_len) puts pairs on every part of the ramp.
  head_dim, base, length = 32, 10000.0, 1024
  theta = base ** -(2 * np.arange(head_dim // 2) / head_dim)
  turns = length / (2 * np.pi / theta)
  assert (turns > 32).any() and (turns < 1).any() and ((turns > 1) & (turns < 32)).sum() >= 4
  gamma = np.clip((turns - 1) / (32 - 1), 0, 1)
  frequencies = (1 - gamma) * theta / factor + gamma * theta
  q, k = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (2, head_dim)), np.float64)
  for n, m in ((5, 0), (200, 3), (1000, 999), (700, 64)):
    np.testing.assert_allclose(_rope_score(q, k, n, m, head_dim, length, base=base, yarn_factor=factor),
                               _paper_rope_score(q, k, n, m, frequencies, 0.1 * np.log(factor) + 1),
                               rtol=2e-4, atol=2e-4)


def test_p_rope_keeps_the_highest_frequencies_and_leaves_the_rest_unturned():
  # Barbero et al. 2025: theta_k = b^(-2k/d), the first floor(p d/2) (the fastest) kept, the others 0.
  head_dim, p = 16, 0.75
  theta = 10000.0 ** -(2 * np.arange(head_dim // 2) / head_dim)
  frequencies = np.where(np.arange(head_dim // 2) < 6, theta, 0.0)
  q, k = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (2, head_dim)), np.float64)
  for n, m in ((9, 2), (300, 0), (4000, 17)):
    np.testing.assert_allclose(_rope_score(q, k, n, m, head_dim, kept_frequencies=p),
                               _paper_rope_score(q, k, n, m, frequencies), rtol=1e-4, atol=1e-4)
  rotated = _rope_terms([0, 7, 3000], head_dim, kept_frequencies=p).apply(
      jax.random.normal(jax.random.PRNGKey(2), (1, 3, 2, head_dim)))
  x = jax.random.normal(jax.random.PRNGKey(2), (1, 3, 2, head_dim))
  unturned = [6, 7, 14, 15]  # Pairs 6 and 7: features (6, 14) and (7, 15).
  np.testing.assert_array_equal(rotated[..., unturned], x[..., unturned])
  # Not GPT-NeoX's partial rotary: fraction=0.75 spreads 6 frequencies from 1 to 1/base over 12 features.
  assert not np.isclose(_rope_score(q, k, 9, 2, head_dim, fraction=0.75),
                        _rope_score(q, k, 9, 2, head_dim, kept_frequencies=p), rtol=1e-3)


@pytest.mark.parametrize('options, error', [
    ({'yarn_factor': 4.0, 'ntk_factor': 2.0}, r'yarn_factor=4.0 stretches the positions by itself'),
    ({'yarn_factor': 0.5}, r'yarn_factor=0.5 must be >= 1'),
    ({'yarn_alpha': 40.0}, r'yarn_beta=32.0 must be > 40.0'),
    ({'kept_frequencies': 0.0}, r'kept_frequencies=0.0 must be > 0 and <= 1'),
])
def test_bad_yarn_and_p_rope_options_are_refused_naming_the_key(options, error):
  config = encodings.options_config()
  config.rope.update(options)
  with pytest.raises(ValueError, match='^model.pos_encoding_options.rope.' + error):
    encodings.resolve_options('rope', config)


@pytest.mark.parametrize('option, value', [('yarn_factor', 4.0), ('kept_frequencies', 0.5),
                                           ('interpolation_factor', 2.0), ('ntk_factor', 2.0)])
def test_rotary_stretches_on_a_non_rotary_encoding_are_refused(option, value):
  config = encodings.options_config()
  config.rope[option] = value
  with pytest.raises(ValueError, match=f"^model.pos_encoding_options.rope.{option} is set but "
                                       "model.pos_encoding='alibi'; it would have no effect"):
    encodings.resolve_options('alibi', config)


def test_p_rope_that_keeps_no_pair_is_refused():
  options = encodings.REGISTRY['rope'].Options(kept_frequencies=0.1)
  with pytest.raises(ValueError, match=r'rope.kept_frequencies=0.1 keeps no frequency of the 4 pairs'):
    encodings.REGISTRY['rope'].check_model(options, max_len=16, head_dim=8)


@pytest.mark.parametrize('wrapped', ['alibi', 'kerple_log', 'fire'])
def test_dape_adds_an_mlp_of_the_scaled_logits_and_the_wrapped_bias(wrapped):
  # Zheng et al. 2024, eq. 5: A = QK^T/sqrt(d) + B + f([QK^T/sqrt(d); B]), f = Linear(2H, W), LeakyReLU, Linear(W, H).
  heads, head_dim, width = 3, 4, 5
  module = encodings.create('dape', encodings.REGISTRY['dape'].Options(bias=wrapped, mlp_width=width), max_len=16,
                            dim=heads * head_dim, num_heads=heads, head_dim=head_dim)
  positions = jnp.arange(6)[None]
  params = _perturbed(module.init(jax.random.PRNGKey(0), positions, positions, causal=True,
                                  method='attention_terms')['params'], 0.3)
  terms = module.apply({'params': params}, positions, positions, causal=True, method='attention_terms')
  plain = encodings.create(wrapped, encodings.REGISTRY[wrapped].Options(), max_len=16, dim=heads * head_dim,
                           num_heads=heads, head_dim=head_dim)
  inner = {'params': params[wrapped]} if wrapped in params else {}
  bias = np.asarray(plain.apply(inner, positions, positions, causal=True, method='attention_terms').bias[0],
                    np.float64)
  np.testing.assert_allclose(terms.bias[0], bias, rtol=1e-6)  # B is the wrapped encoding's, unchanged.
  q, k = jax.random.normal(jax.random.PRNGKey(3), (2, 1, 6, heads, head_dim))
  logits = np.einsum('qhd,khd->hqk', np.asarray(q[0], np.float64), np.asarray(k[0], np.float64)) / np.sqrt(head_dim)
  x = np.concatenate([logits, bias], axis=0).transpose(1, 2, 0)  # [q, k, 2H]
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  hidden = x @ p['hidden_kernel'] + p['hidden_bias']
  hidden = np.where(hidden > 0, hidden, 0.01 * hidden)
  expected = bias + (hidden @ p['output_kernel'] + p['output_bias']).transpose(2, 0, 1)
  np.testing.assert_allclose(terms.logit_bias(q, k, None)[0], expected, rtol=1e-4, atol=1e-5)


def test_xpos_scores_are_ropes_decayed_by_zeta_to_the_relative_position():
  head_dim, gamma = 12, 512.0
  module = encodings.create('xpos', encodings.REGISTRY['xpos'].Options(), max_len=64, dim=2 * head_dim, num_heads=2,
                            head_dim=head_dim)
  q, k = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (2, head_dim)), np.float64)

  def score(n, m):
    terms = module.apply({}, jnp.array([[n]]), jnp.array([[m]]), causal=True, method='attention_terms')
    return float(jnp.sum(terms.query_rotary.apply(jnp.asarray(q)[None, None, None])
                         * terms.key_rotary.apply(jnp.asarray(k)[None, None, None])))

  def paper(n, m):  # Pair i = (x_i, x_{i + d/2}) turns by n theta_i and scales by zeta_i^(n / gamma) (keys: -m).
    half = head_dim // 2
    theta = 10000.0 ** -(2 * np.arange(half) / head_dim)
    zeta = (np.arange(half) / half + 0.4) / 1.4
    def turn(x, position, sign):
      angle, scale = position * theta, zeta ** (sign * position / gamma)
      return np.concatenate([x[:half] * np.cos(angle) - x[half:] * np.sin(angle),
                             x[half:] * np.cos(angle) + x[:half] * np.sin(angle)]) * np.tile(scale, 2)
    return float(turn(q, n, 1) @ turn(k, m, -1))

  for n, m in ((5, 5), (40, 3), (300, 290), (700, 0), (3, 40)):
    assert score(n, m) == pytest.approx(paper(n, m), rel=1e-4, abs=1e-4), (n, m)
  assert score(400, 100) == pytest.approx(score(300, 0), rel=1e-4)  # Relative.


# Content terms: logits that read the queries and keys, against float64 evaluations of their papers.

def _content_logits(name: str, query_positions, key_positions, *, causal: bool, mask=None, params=None,
                    max_len: int = 1024, num_heads: int = 2, head_dim: int = 6, seed: int = 0):
  """Encoding `name`'s content logits [heads, q, k] for random queries and keys, with the float64 inputs."""
  module = encodings.create(name, encodings.REGISTRY[name].Options(), max_len=max_len, dim=num_heads * head_dim,
                            num_heads=num_heads, head_dim=head_dim)
  query_positions, key_positions = jnp.asarray(query_positions)[None], jnp.asarray(key_positions)[None]
  if params is None:  # The initial parameters, perturbed (CoPE's start at zero).
    initial = module.init(jax.random.PRNGKey(0), query_positions, key_positions, causal=causal,
                          method='attention_terms')['params']
    params = _perturbed(initial, 0.5)
  terms = module.apply({'params': params}, query_positions, key_positions, causal=causal, method='attention_terms')
  keys = jax.random.split(jax.random.PRNGKey(seed), 2)
  query = jax.random.normal(keys[0], (1, query_positions.shape[1], num_heads, head_dim))
  key = jax.random.normal(keys[1], (1, key_positions.shape[1], num_heads, head_dim))
  logits = terms.logit_bias(query, key, None if mask is None else jnp.asarray(mask)[None, None])
  as64 = lambda x: np.asarray(x, np.float64)
  return as64(logits[0]), as64(query[0]), as64(key[0]), jax.tree.map(as64, params), params


def test_transformer_xl_logits_match_the_paper():
  logits, q, k, params, _ = _content_logits('transformer_xl', QUERIES, KEYS, causal=False)
  u, v, w_r = params['content_bias'], params['position_bias'], params['relative_projection']['kernel']
  dim, head_dim = w_r.shape[0], q.shape[-1]
  expected = np.zeros(logits.shape)
  for i, position_i in enumerate(QUERIES):
    for j, position_j in enumerate(KEYS):
      d = float(position_i - position_j)  # R_{i-j}: sines then cosines of d / 10000^(2k/dim).
      angles = d / 10000.0 ** (np.arange(0, dim, 2) / dim)
      r = np.concatenate([np.sin(angles), np.cos(angles)])
      for h in range(q.shape[1]):  # The paper's (b) + (d) terms and the content bias' (c), scaled as (a).
        expected[h, i, j] = (u[h] @ k[j, h] + (q[i, h] + v[h]) @ (r @ w_r[:, h, :])) / np.sqrt(head_dim)
  np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)


def _cope_paper(q, k, mask, embeddings, *, bidirectional: bool):
  """CoPE of Golovneva et al.'s code, per head, in float64 loops (the later-keys half is this framework's)."""
  heads, length = q.shape[1], q.shape[0]
  cap = embeddings.shape[1] - 1
  expected = np.zeros((heads, length, length))
  for h in range(heads):
    for i in range(length):
      gates = np.where(mask[i], 1 / (1 + np.exp(-(k[:, h] @ q[i, h]) / np.sqrt(q.shape[-1]))), 0.0)
      for j in range(length):
        later = j > i
        if later and not bidirectional:
          continue
        position = min(gates[i:j + 1].sum() if later else gates[j:i + 1].sum(), cap)
        low, high = int(np.floor(position)), int(np.ceil(position))
        table = embeddings[int(later)]
        weight = position - low
        expected[h, i, j] = q[i, h] @ (weight * table[high] + (1 - weight) * table[low])
  return expected


@pytest.mark.parametrize('causal', [True, False])
def test_cope_logits_match_the_paper(causal):
  length = 13
  positions = np.arange(length) + 5
  mask = np.tril(np.ones((length, length), bool)) if causal else np.ones((length, length), bool)
  mask[:, [3, 11, 12]] = False  # Padded keys count nothing.
  # A table of 6: gate sums pass the cap, which reads its last row.
  module_max_len = 6
  logits, q, k, params, _ = _content_logits('cope', positions, positions, causal=causal, mask=mask,
                                            max_len=module_max_len)
  expected = _cope_paper(q, k, mask, params['embeddings'], bidirectional=not causal)
  np.testing.assert_allclose(np.where(mask, logits, 0.0), np.where(mask, expected, 0.0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('name', ['transformer_xl', 'cope'])
@pytest.mark.parametrize('causal', [False, True])
def test_content_terms_are_the_same_when_every_position_shifts_and_finite_beyond_max_len(name, causal):
  positions = np.arange(9)
  logits, _, _, _, params = _content_logits(name, positions, positions, causal=causal, max_len=16)
  for shift in (1, 37, 400):  # TXL's table covers every distance of these 9 positions; CoPE reads no positions.
    shifted = _content_logits(name, positions + shift, positions + shift, causal=causal, max_len=16, params=params)[0]
    np.testing.assert_allclose(shifted, logits, rtol=1e-5, atol=1e-5)
  long = np.arange(40)  # Beyond max_len 16: the distance table grows with the call.
  assert np.isfinite(_content_logits(name, long, long, causal=causal, max_len=16, params=params)[0]).all()


# Randomized positions (Ruoss et al. 2023).

def test_randomized_positions_are_sorted_distinct_uniform_draws():
  draws = jax.vmap(lambda key: randomized_positions(key, 6, 20)[0])(jax.random.split(jax.random.PRNGKey(0), 4000))
  draws = np.asarray(draws)
  assert (np.diff(draws, axis=1) > 0).all() and draws.min() >= 0 and draws.max() < 20
  # Without replacement, each of the 20 positions is drawn with probability 6/20 (sd of the mean ~0.007).
  np.testing.assert_allclose(np.bincount(draws.ravel(), minlength=20) / 4000, 0.3, atol=0.03)
  np.testing.assert_array_equal(randomized_positions(jax.random.PRNGKey(3), 6, 6), np.arange(6)[None])


@pytest.mark.parametrize('name', ['sinusoidal', 'rope', 'alibi'])
def test_randomized_positions_draw_per_key_and_equal_plain_ones_when_every_position_is_drawn(name):
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 8), 1, 16)
  plain = _classifier(name, 'cls', max_len=8)
  params = plain.init({'params': jax.random.PRNGKey(0)}, tokens, train=False)['params']
  forward = lambda model, key: model.apply({'params': params}, tokens, train=True,
                                           rngs={'dropout': jax.random.PRNGKey(5), 'positions': key})
  no_draw = jax.random.PRNGKey(9)  # Not read by a model without randomized positions.
  # 9 positions (CLS and 8 tokens) drawn from [0, 9) are 0 ... 8: the plain model.
  np.testing.assert_array_equal(forward(plain.clone(randomized_positions=9), jax.random.PRNGKey(2)),
                                forward(plain, no_draw))
  randomized = plain.clone(randomized_positions=500, config=dataclasses.replace(plain.config, max_len=500))
  first = forward(randomized, jax.random.PRNGKey(2))
  np.testing.assert_array_equal(forward(randomized, jax.random.PRNGKey(2)), first)
  assert not np.allclose(forward(randomized, jax.random.PRNGKey(3)), first, atol=1e-4)
  evaluate = lambda: randomized.apply({'params': params}, tokens, train=False)
  np.testing.assert_array_equal(evaluate(), evaluate())  # One fixed draw in evaluation.
  with pytest.raises(encodings.CannotExtrapolate, match='model.randomized_positions=500 cannot place an input of 601 '
                                                        'positions'):
    randomized.apply({'params': params}, jnp.ones((1, 600), jnp.int32), train=False)


def test_an_old_configs_unselected_options_at_former_defaults_read_as_todays_and_the_selected_ones_stay():
  old = {'pos_encoding': 'rope', 'pos_encoding_options': {'t5': {'max_distance': 128, 'num_buckets': 32},
                                                          'fire': {'init_threshold': 512.0, 'mlp_width': 32}}}
  upgraded = encodings.upgrade_config(old)
  assert upgraded['pos_encoding_options']['t5'] == {'max_distance': 0, 'num_buckets': 32}
  assert upgraded['pos_encoding_options']['fire'] == {'init_threshold': 0.0, 'mlp_width': 32}
  encodings.resolve_options('rope', upgraded['pos_encoding_options'])  # As today's config: no option set.
  trained = {'pos_encoding': 't5', 'pos_encoding_options': {'t5': {'max_distance': 128, 'num_buckets': 32}}}
  assert encodings.upgrade_config(trained)['pos_encoding_options']['t5']['max_distance'] == 128
  elsewhere = {'pos_encoding': 'rope', 'pos_encoding_options': {'t5': {'max_distance': 100, 'num_buckets': 32}}}
  with pytest.raises(ValueError, match=r't5.max_distance is set but'):  # Not a former default: a real setting.
    encodings.resolve_options('rope', encodings.upgrade_config(elsewhere)['pos_encoding_options'])
