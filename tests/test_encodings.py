"""Positional encodings against float64 oracles and the invariances they promise."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from lra_posenc import encodings
from lra_posenc.encodings import t5
from lra_posenc.models import attention
from lra_posenc.models.attention import broadcast_over_batch
from lra_posenc.models.classifier import TransformerClassifier
from lra_posenc.models.transformer import Encoder, TransformerConfig

# The acceptance bound on every table entry: float32 keeps ~6e-8 relative error for
# values in [-1, 1], so 1e-5 leaves room only for a genuinely accurate recurrence.
TABLE_TOLERANCE = 1e-5


@pytest.mark.parametrize('length,dim,max_len', [(4096, 1024, 4096), (2048, 512, 2048), (100, 7, 130), (2, 1, 2)])
def test_chebyshev_matches_closed_form(length, dim, max_len):
  x = 2.0 * np.arange(length) / (max_len - 1) - 1.0
  oracle = np.cos(np.arange(dim)[None, :] * np.arccos(np.clip(x, -1, 1))[:, None])
  table = encodings.chebyshev_table(length, dim, max_len)
  assert table.dtype == np.float32 and table.shape == (length, dim)
  np.testing.assert_array_less(np.abs(table - oracle).max(), TABLE_TOLERANCE)


def test_chebyshev_position_offset_shifts_grid():
  shifted = encodings.chebyshev_table(10, 16, 64, position_offset=3)
  np.testing.assert_allclose(shifted, encodings.chebyshev_table(13, 16, 64)[3:], atol=1e-7)


@pytest.mark.parametrize('length,dim,row_stride', [(4096, 1024, 9), (2048, 512, 5), (300, 64, 1), (50, 2, 1)])
def test_legendre_matches_scipy(length, dim, row_stride):
  # Every order up to 300 and a strided sample (plus the last) of the longer tables:
  # scipy needs ~20 s for the full 4096 x 1024 oracle.
  rows = np.unique(np.append(np.arange(0, length, row_stride), length - 1))
  x = -1.0 + 2.0 * np.arange(dim) / (dim - 1)
  oracle = special.eval_legendre(rows[:, None], x[None, :])
  table = encodings.legendre_table(length, dim)
  assert table.dtype == np.float32 and table.shape == (length, dim)
  np.testing.assert_array_less(np.abs(table[rows] - oracle).max(), TABLE_TOLERANCE)


def test_legendre_open_grid_and_offset():
  dim = 10
  x = -1.0 + 2.0 * np.arange(dim) / dim
  oracle = special.eval_legendre(np.arange(5, 25)[:, None], x[None, :])
  table = encodings.legendre_table(20, dim, grid='open', position_offset=5)
  np.testing.assert_array_less(np.abs(table - oracle).max(), TABLE_TOLERANCE)


def test_sinusoidal_matches_float64_and_interleaves():
  length, dim = 4096, 1024
  angles = np.arange(length)[:, None] / 10000.0 ** (np.arange(0, dim, 2) / dim)[None, :]
  table = encodings.sinusoidal_table(length, dim)
  np.testing.assert_array_less(np.abs(table[:, 0::2] - np.sin(angles)).max(), TABLE_TOLERANCE)
  np.testing.assert_array_less(np.abs(table[:, 1::2] - np.cos(angles)).max(), TABLE_TOLERANCE)


def test_tables_are_read_only_and_cached():
  table = encodings.legendre_table(64, 16)
  assert encodings.legendre_table(64, 16) is table
  with pytest.raises(ValueError):
    table[0, 0] = 1.0


def test_chebyshev_refuses_positions_beyond_max_len():
  with pytest.raises(ValueError, match='cannot extrapolate'):
    encodings.chebyshev_table(65, 8, 64)


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
  np.testing.assert_allclose(encodings.alibi_slopes(8), [2.0 ** -(i + 1) for i in range(8)])
  # 12 heads: the 8-head slopes, then every other slope of the 16-head sequence.
  expected = [2.0 ** -(i + 1) for i in range(8)] + [2.0 ** -(0.5 + i) for i in range(4)]
  np.testing.assert_allclose(encodings.alibi_slopes(12), expected, rtol=1e-6)


def test_alibi_bias_is_symmetric_distance_penalty():
  module = encodings.create('alibi', encodings.REGISTRY['alibi'].Options(), max_len=8, dim=8, num_heads=8,
                            head_dim=1)
  positions = jnp.arange(6)[None]
  bias = module.apply({}, positions, positions, causal=False, method='attention_terms').bias
  np.testing.assert_allclose(bias[0, 0], -0.5 * np.abs(np.arange(6)[:, None] - np.arange(6)[None, :]))


def test_t5_buckets_bidirectional_and_causal():
  relative = jnp.arange(-200, 201)
  both = t5.relative_position_bucket(relative, bidirectional=True, num_buckets=32, max_distance=128)
  assert set(np.unique(both[relative > 0])).isdisjoint(np.unique(both[relative < 0]))
  np.testing.assert_array_equal(both[200 - 7:200 + 8], [7, 6, 5, 4, 3, 2, 1, 0, 17, 18, 19, 20, 21, 22, 23])
  assert both.max() == 31
  causal = t5.relative_position_bucket(relative, bidirectional=False, num_buckets=32, max_distance=128)
  assert (causal[relative >= 0] == 0).all() and causal.max() == 31


def _small_transformer(name: str, *, max_len: int, num_layers: int) -> TransformerConfig:
  options = encodings.resolve_options(name, encodings.options_config())
  return TransformerConfig(emb_dim=16, num_heads=2, num_layers=num_layers, qkv_dim=16, mlp_dim=32, dropout_rate=0.0,
                           attention_dropout_rate=0.0, pos_encoding=name, pos_encoding_options=options,
                           max_len=max_len)


def _classifier(name: str, pooling: str, max_len: int = 16) -> TransformerClassifier:
  config = _small_transformer(name, max_len=max_len + (pooling == 'cls'), num_layers=2)
  return TransformerClassifier(config, vocab_size=16, num_classes=10, pooling=pooling, classifier_dim=16)


@pytest.mark.parametrize('pooling', ['cls', 'mean'])
@pytest.mark.parametrize('name', list(encodings.REGISTRY))
def test_every_encoding_ignores_padding(name, pooling):
  model = _classifier(name, pooling)
  tokens = jax.random.randint(jax.random.PRNGKey(1), (3, 9), 1, 16)
  params = model.init({'params': jax.random.PRNGKey(0)}, tokens, train=False)['params']
  padded = jnp.concatenate([tokens, jnp.zeros((3, 7), tokens.dtype)], axis=1)
  logits = model.apply({'params': params}, tokens, train=False)
  np.testing.assert_allclose(model.apply({'params': params}, padded, train=False), logits, atol=1e-5)
  assert np.isfinite(logits).all()


@pytest.mark.parametrize('name', ['sinusoidal', 'learned', 'chebyshev', 'legendre', 'rope', 'alibi', 't5'])
def test_every_encoding_makes_order_matter(name):
  model = _classifier(name, 'mean')
  tokens = jnp.arange(1, 9)[None]
  params = model.init({'params': jax.random.PRNGKey(0)}, tokens, train=False)['params']
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
  table = encodings.legendre_table(model.config.max_len, model.config.emb_dim)
  assert any(np.shape(c) == table.shape and np.array_equal(c, table) for c in constants)


@pytest.mark.parametrize('name', ['learned', 'chebyshev'])
def test_non_extrapolating_encodings_reject_long_inputs(name):
  model = _classifier(name, 'mean', max_len=8)
  with pytest.raises(ValueError, match='cannot extrapolate'):
    model.init({'params': jax.random.PRNGKey(0)}, jnp.ones((1, 9), jnp.int32), train=False)


def test_explicit_positions_read_nan_beyond_the_table():
  table = encodings.sinusoidal_table(4, 2)
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
    ('chebyshev', 'max_len', 1, r"chebyshev.max_len=1 must be >= 2 \(or 0: the model's max_len\)"),
    ('chebyshev', 'position_offset', -1, r'chebyshev.position_offset=-1 must be >= 0'),
    ('legendre', 'position_offset', -2, r'legendre.position_offset=-2 must be >= 0 \(a polynomial order\)'),
    ('legendre', 'scale', 0.0, r'legendre.scale=0.0 must be > 0'),
])
def test_option_values_out_of_range_fail_at_config_time_naming_the_key(name, option, value, message):
  options = encodings.options_config()
  options[name][option] = value
  with pytest.raises(ValueError, match='^model.pos_encoding_options.' + message):
    encodings.resolve_options(name, options)
