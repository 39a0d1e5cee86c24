"""Attention paths (XLA, cuDNN) against a float64 softmax-attention oracle, the choice between them, and remat.

The oracle is NumPy in float64: logits, masking, softmax and the softmax backward pass
written out, independent of JAX. cuDNN cases run only on an NVIDIA GPU
(`scripts/gpu_campaign.py --benchmarks=attention` runs them there); on a CPU they skip.
"""
import re
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra_posenc import encodings
from lra_posenc.models import attention, dense
from lra_posenc.models.transformer import attention_paths, transformer_config
from lra_posenc.listops import train as listops_train
from lra_posenc.listops import settings as listops_settings
from lra_posenc.translation import train as translation_train
from lra_posenc.translation.translator import create_translator
from configs.listops import lra
from conftest import toy_config

BATCH, HEADS, HEAD_DIM, LENGTH = 3, 4, 16, 6
ON_NVIDIA_GPU = attention.nvidia_compute_capability(jax.local_devices()[0]) is not None
PATHS = ['xla', pytest.param('cudnn', marks=pytest.mark.skipif(not ON_NVIDIA_GPU, reason='needs an NVIDIA GPU'))]
# Rows of 6, 4 and 1 real keys, padding trailing (as every pipeline pads).
KEY_VALID = np.arange(LENGTH)[None, :] < np.array([LENGTH, 4, 1])[:, None]


def oracle(query, key, value, bias, mask, output_gradient):
  """Attention output and the gradients of sum(output * output_gradient) for query, key, value and bias (float64)."""
  query, key, value, output_gradient = (np.asarray(x, np.float64) for x in (query, key, value, output_gradient))
  scale = 1.0 / np.sqrt(query.shape[-1])
  logits = np.einsum('bqhd,bkhd->bhqk', query, key) * scale
  if bias is not None:
    logits = logits + np.asarray(bias, np.float64)
  if mask is not None:
    logits = np.where(mask, logits, -np.inf)
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  output = np.einsum('bhqk,bkhd->bqhd', weights, value)
  weights_gradient = np.einsum('bqhd,bkhd->bhqk', output_gradient, value)
  logits_gradient = weights * (weights_gradient - (weights_gradient * weights).sum(-1, keepdims=True))
  gradients = {
      'query': np.einsum('bhqk,bkhd->bqhd', logits_gradient, key) * scale,
      'key': np.einsum('bhqk,bqhd->bkhd', logits_gradient, query) * scale,
      'value': np.einsum('bhqk,bqhd->bkhd', weights, output_gradient),
  }
  if bias is not None:  # A bias shared over the batch (or heads) gets the sum over what it is shared by.
    shared = tuple(axis for axis, size in enumerate(np.shape(bias)) if size == 1)
    gradients['bias'] = logits_gradient.sum(axis=shared, keepdims=True)
  return output, gradients


def encoding_terms(name: str, query_positions, key_positions, *, causal: bool) -> encodings.AttentionTerms:
  module = encodings.create(name, encodings.REGISTRY[name].Options(), max_len=LENGTH, dim=HEADS * HEAD_DIM,
                            num_heads=HEADS, head_dim=HEAD_DIM)
  terms, params = module.init_with_output(jax.random.key(1), query_positions, key_positions, causal=causal,
                                          method=module.attention_terms)
  if name == 't5':  # T5's learned biases start near 0.02; make them large enough to matter (the others' do).
    terms = module.apply(jax.tree.map(lambda p: p * 50.0, params), query_positions, key_positions, causal=causal,
                         method=module.attention_terms)
  return terms


CALLS = {  # name: (query positions, key valid, causal)
    'padded encoder': (np.arange(LENGTH)[None], KEY_VALID, False),
    'causal decoder': (np.arange(LENGTH)[None], None, True),
    'decoding step 3 over a cache': (np.array([[3]]), np.arange(LENGTH)[None] <= 3, False),
}


@pytest.mark.parametrize('implementation', PATHS)
@pytest.mark.parametrize('call', list(CALLS))
@pytest.mark.parametrize('encoding', list(encodings.REGISTRY))
def test_attention_path_matches_the_float64_oracle_forward_and_backward(encoding, call, implementation):
  query_positions, key_valid, causal = CALLS[call]
  key_positions = np.arange(LENGTH)[None]
  terms = encoding_terms(encoding, query_positions, key_positions, causal=causal or call.startswith('decoding'))
  keys = jax.random.split(jax.random.key(0), 4)
  query = jax.random.normal(keys[0], (BATCH, query_positions.shape[1], HEADS, HEAD_DIM))
  key, value = (jax.random.normal(k, (BATCH, LENGTH, HEADS, HEAD_DIM)) for k in keys[1:3])
  output_gradient = jax.random.normal(keys[3], query.shape)
  if terms.query_rotary is not None:  # Rotary encodings rotate queries and keys before the call, on every path.
    query, key = terms.query_rotary.apply(query), terms.key_rotary.apply(key)
  dtype = jnp.bfloat16 if implementation == 'cudnn' else jnp.float32
  query, key, value = (x.astype(dtype) for x in (query, key, value))
  valid = None if key_valid is None else jnp.asarray(key_valid)
  if implementation == 'cudnn':  # Differentiated, so a training call: where cuDNN refuses it, `auto` takes XLA.
    facts = attention.AttentionCall(dtype=dtype, head_dim=HEAD_DIM, query_length=query.shape[1], key_length=LENGTH,
                                    has_bias=terms.bias is not None or terms.content is not None, dropout_rate=0.0,
                                    training=True, has_content=terms.content is not None, padded=valid is not None)
    obstacle = attention.cudnn_obstacle(facts, jax.local_devices()[0])
    if obstacle is not None:
      pytest.skip(obstacle)

  def objective(query, key, value, bias):
    out = attention.attend(query, key, value, bias=bias, key_valid=valid, causal=causal, implementation=implementation)
    return (out.astype(jnp.float32) * output_gradient).sum(), out

  # The keys each query may see, written out here rather than taken from the code under test.
  mask = np.ones((1, 1, query.shape[1], LENGTH), bool) if key_valid is None else key_valid[:, None, None, :]
  if causal:  # Query i sees keys 0..i.
    mask = mask & np.tril(np.ones((query.shape[1], LENGTH), bool))
  bias = terms.logit_bias(query, key, jnp.asarray(mask))  # Content terms (Transformer-XL, CoPE) come as a bias.
  arguments = (query, key, value, bias)
  differentiate = (0, 1, 2, 3) if bias is not None else (0, 1, 2)
  with jax.default_matmul_precision('highest'):  # float32 on XLA:GPU would otherwise multiply in TF32.
    gradients, output = jax.grad(objective, argnums=differentiate, has_aux=True)(*arguments)
  expected_output, expected = oracle(query.astype(jnp.float32), key.astype(jnp.float32),
                                     value.astype(jnp.float32), bias, mask, output_gradient)
  tolerance = 3e-2 if implementation == 'cudnn' else 2e-5  # Relative to the largest entry.
  close = lambda got, want: np.abs(np.asarray(got, np.float64) - want).max() <= tolerance * np.abs(want).max()
  assert close(output, expected_output)
  for name, gradient in zip(('query', 'key', 'value', 'bias'), gradients):
    assert close(gradient, expected[name]), name


def test_attention_weights_dropout_path_keeps_the_oracle_in_expectation():
  """Attention dropout rescales kept weights by 1/(1-p): averaged over many masks, the output is the oracle's."""
  keys = jax.random.split(jax.random.key(0), 3)
  query = jax.random.normal(keys[0], (1, 4, 1, 8))
  key, value = (jax.random.normal(k, (1, 4, 1, 8)) for k in keys[1:])
  outputs = jax.vmap(lambda rng: attention.attend(query, key, value, bias=None, key_valid=None, causal=True,
                                                  dropout_rate=0.3, dropout_rng=rng))(
      jax.random.split(jax.random.key(1), 20000))
  expected, _ = oracle(query, key, value, None, np.tril(np.ones((4, 4), bool))[None, None],
                       np.zeros(query.shape))
  np.testing.assert_allclose(outputs.mean(0), expected, atol=0.03)


@pytest.mark.parametrize('dtype', [jnp.bfloat16, jnp.float32])  # transformer.DTYPES
def test_the_xla_path_agrees_with_jax_dot_product_attention_in_every_dtype(dtype):
  """`attend` on XLA forms the weights itself; `jax.nn.dot_product_attention` (its XLA path, which it replaced)
  must give the same output and gradients up to one rounding of the dtype, with a bias, padding and the causal mask,
  and the logits' product must use the dot algorithm that function uses for bfloat16 inputs."""
  keys = jax.random.split(jax.random.key(0), 5)
  query, key, value = (jax.random.normal(k, (BATCH, LENGTH, HEADS, HEAD_DIM)).astype(dtype) for k in keys[:3])
  bias = jax.random.normal(keys[3], (1, HEADS, LENGTH, LENGTH)).astype(dtype)
  cotangent = jax.random.normal(keys[4], query.shape).astype(dtype)
  mask = jnp.asarray(KEY_VALID)[:, None, None, :] & jnp.tril(jnp.ones((LENGTH, LENGTH), bool))
  ours = lambda *args: attention.attend(*args[:3], bias=args[3], key_valid=jnp.asarray(KEY_VALID), causal=True)
  theirs = lambda *args: jax.nn.dot_product_attention(*args[:3], bias=args[3], mask=mask, implementation='xla')
  inputs = (query, key, value, bias)

  def output_and_gradients(attention_fn):
    loss = lambda *args: (attention_fn(*args) * cotangent).astype(jnp.float32).sum()
    return attention_fn(*inputs), *jax.grad(loss, (0, 1, 2, 3))(*inputs)

  for result, expected in zip(output_and_gradients(ours), output_and_gradients(theirs)):
    result, expected = np.asarray(result, np.float32), np.asarray(expected, np.float32)
    np.testing.assert_allclose(result, expected, rtol=0, atol=2 * float(jnp.finfo(dtype).eps) * np.abs(expected).max())
  products = [e for e in jax.make_jaxpr(ours)(*inputs).jaxpr.eqns if e.primitive.name == 'dot_general']
  expected_algorithm = {jnp.bfloat16: jax.lax.DotAlgorithmPreset.BF16_BF16_F32, jnp.float32: None}[dtype]
  assert products[0].params['precision'] == expected_algorithm


def fake_gpu(capability: str = '9.0') -> types.SimpleNamespace:
  """What `choose_path` reads of a device, as an NVIDIA GPU of `capability` reports it."""
  return types.SimpleNamespace(platform='gpu', device_kind='NVIDIA H100 80GB HBM3', compute_capability=capability,
                               client=types.SimpleNamespace(platform_version='cuda 12080'))


def call(**changes) -> attention.AttentionCall:
  facts = dict(dtype=jnp.bfloat16, head_dim=64, query_length=2001, key_length=2001, has_bias=False,
               dropout_rate=0.0, training=True, padded=False)
  return attention.AttentionCall(**(facts | changes))


@pytest.mark.parametrize('changes, reason', [
    ({}, None),
    ({'dtype': jnp.float32}, 'computes in bfloat16 or float16; model.dtype is float32'),
    ({'dropout_rate': 0.1}, r'attention dropout \(model.attention_dropout_rate=0.1\)'),
    ({'dropout_rate': 0.1, 'training': False}, None),  # Evaluation has no dropout.
    ({'head_dim': 12}, 'multiple of 8 and at most 256 on compute capability 9.0; .* = 12'),
    ({'head_dim': 192}, None),
    ({'has_bias': True}, 'trains with an attention bias or key padding only at even lengths; this call attends 2001 '
     'queries'),
    ({'padded': True}, 'trains with an attention bias or key padding only at even lengths'),
    ({'padded': True, 'training': False}, None),
    ({'padded': True, 'query_length': 2000, 'key_length': 2000}, None),
    ({'has_bias': True, 'training': False}, None),
    ({'has_bias': True, 'query_length': 2000, 'key_length': 2000}, None),
    ({'has_bias': True, 'has_content': True, 'query_length': 2000, 'key_length': 2000},
     'computes attention logits from the queries and keys'),
])
def test_cudnn_serves_the_calls_jax_documents_and_names_the_obstacle_otherwise(changes, reason):
  path = attention.choose_path('auto', call(**changes), fake_gpu())
  if reason is None:
    assert path == attention.AttentionPath('cudnn')
  else:
    assert path.implementation == 'xla'
    assert re.search(reason, path.reason), path.reason
    with pytest.raises(ValueError, match="model.attention_implementation='cudnn' cannot run here: "):
      attention.choose_path('cudnn', call(**changes), fake_gpu())


def test_head_dim_limit_before_hopper_is_128():
  assert attention.choose_path('auto', call(head_dim=192), fake_gpu('8.0')).implementation == 'xla'
  assert attention.choose_path('auto', call(head_dim=128), fake_gpu('8.0')).implementation == 'cudnn'


def test_xla_is_taken_when_asked_even_where_cudnn_could_serve():
  assert attention.choose_path('xla', call(), fake_gpu()) == attention.AttentionPath(
      'xla', 'model.attention_implementation=xla')


@pytest.mark.skipif(jax.default_backend() != 'cpu', reason='states what a CPU takes')
def test_auto_on_this_cpu_takes_xla_and_says_why():
  config = lra.get_config('cpu')
  model = listops_settings.create_model(config)
  paths = attention_paths(model.config, model.attention_calls(config.data.max_length))
  assert paths == {'encoder self-attention': attention.AttentionPath(
      'xla', 'cuDNN fused attention needs an NVIDIA GPU; the device is cpu (cpu)')}


@pytest.mark.skipif(ON_NVIDIA_GPU, reason='on an NVIDIA GPU cudnn may be served')
def test_cudnn_on_a_cpu_is_a_config_error_before_anything_compiles():
  config = lra.get_config('cpu')
  config.model.attention_implementation = 'cudnn'
  with pytest.raises(ValueError, match="model.attention_implementation='cudnn' cannot run here: cuDNN fused "
                                       "attention needs an NVIDIA GPU; the device is cpu"):
    transformer_config(config.model, max_len=65)
  config.model.attention_implementation = 'flash'
  with pytest.raises(ValueError, match=r"model.attention_implementation='flash'.*\['auto', 'xla', 'cudnn'\]"):
    transformer_config(config.model, max_len=65)


def test_the_translation_report_lists_its_three_attention_calls(toy_corpus):
  config = toy_config(toy_corpus)
  config.model.pos_encoding = 'alibi'
  model = create_translator(config, None, (64, 64)).model
  paths = attention_paths(model.config, model.attention_calls(24, 16), device=fake_gpu())
  # No attention dropout and bfloat16 would let cuDNN serve all three; the toy config is float32.
  assert set(paths) == {'encoder self-attention', 'decoder self-attention', 'cross-attention'}
  assert all('model.dtype is float32' in path.reason for path in paths.values())
  config.model.update(dtype='bfloat16', attention_dropout_rate=0.0)
  model = create_translator(config, None, (64, 64)).model
  paths = attention_paths(model.config, model.attention_calls(23, 16), device=fake_gpu())
  assert paths['decoder self-attention'].implementation == 'cudnn'  # Causal, neither bias nor padding: any length.
  assert 'even lengths; this call attends 16 queries to 23 keys' in paths['cross-attention'].reason  # Padded keys.
  assert 'even lengths; this call attends 23 queries to 23 keys' in paths['encoder self-attention'].reason


def test_a_length_bucket_cudnn_cannot_train_is_reported_by_length(toy_corpus):
  """The recorded paths are those of every training batch length, not of the longest alone."""
  config = toy_config(toy_corpus)
  config.model.update(dtype='bfloat16', attention_dropout_rate=0.0, pos_encoding='alibi')
  model = create_translator(config, None, (64, 64)).model
  even = translation_train.training_attention_paths(model, [12, 16, 16], device=fake_gpu())
  assert even == attention_paths(model.config, model.attention_calls(16, 16), device=fake_gpu())
  assert {path.implementation for path in even.values()} == {'cudnn'}
  with_odd = translation_train.training_attention_paths(model, [12, 17], device=fake_gpu())
  assert len(with_odd) == 6 and with_odd['cross-attention, 12 ids'].implementation == 'cudnn'
  for call in ('encoder self-attention', 'decoder self-attention', 'cross-attention'):  # ALiBi's bias; padded keys.
    assert 'even lengths; this call attends 17 queries to 17 keys' in with_odd[f'{call}, 17 ids'].reason


def loss_and_gradients(metrics, init, batch):
  params = init(jax.random.key(0))
  loss = lambda p: metrics(p, batch, jax.random.key(1))['loss']
  return jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.slow
@pytest.mark.parametrize('task, encoding', [('listops', None), ('translation', None),
                                            ('listops', 'transformer_xl')])  # A content term crosses remat too.
def test_remat_gives_the_same_loss_and_gradients(task, encoding, toy_corpus):
  results = []
  for remat in (False, True):
    if task == 'listops':
      config = lra.get_config('cpu')
      config.data.max_length = 24
      config.model.update(emb_dim=32, qkv_dim=32, mlp_dim=64, classifier_dim=32, dropout_rate=0.1,
                          attention_dropout_rate=0.1, remat=remat)
    else:
      config = toy_config(toy_corpus)
      config.model.update(dropout_rate=0.1, attention_dropout_rate=0.1, remat=remat)
    if encoding is not None:
      config.model.pos_encoding = encoding
    workload = (listops_train if task == 'listops' else translation_train).benchmark_workload(config)
    batch = workload.batch(4, np.random.default_rng(0))
    results.append(loss_and_gradients(workload.task.metrics, workload.task.init_params, batch))
  (loss, gradients), (remat_loss, remat_gradients) = results
  assert float(loss) == pytest.approx(float(remat_loss), rel=1e-6)
  # Recomputation may fuse differently, so equal up to float32 rounding: relative to each array's largest
  # entry. Key biases are left out: their true gradient is zero (softmax ignores a shift shared by all keys),
  # so theirs is rounding noise alone.
  errors = {jax.tree_util.keystr(path): float(np.abs(a - b).max() / np.abs(a).max())
            for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(gradients), jax.tree.leaves(remat_gradients))
            if "['key']['bias']" not in jax.tree_util.keystr(path)}
  assert max(errors.values()) < 1e-5, errors


@pytest.mark.parametrize('encoding', ['transformer_xl', 'cope'])
def test_content_terms_take_xla_where_cudnn_could_serve_and_the_report_says_why(toy_corpus, encoding):
  config = toy_config(toy_corpus)
  config.model.update(dtype='bfloat16', attention_dropout_rate=0.0, pos_encoding=encoding)
  model = create_translator(config, None, (64, 64)).model
  paths = attention_paths(model.config, model.attention_calls(24, 16), device=fake_gpu())
  assert paths['cross-attention'].implementation == 'cudnn'  # No positional terms there.
  for call in ('encoder self-attention', 'decoder self-attention'):
    assert paths[call].implementation == 'xla'
    assert 'computes attention logits from the queries and keys' in paths[call].reason


def test_cudnn_asked_for_a_content_term_is_a_config_error(monkeypatch):
  config = lra.get_config('cpu')
  config.model.update(pos_encoding='cope', attention_implementation='cudnn', dtype='bfloat16',
                      attention_dropout_rate=0.0)
  monkeypatch.setattr(jax, 'local_devices', lambda: [fake_gpu()])
  with pytest.raises(ValueError, match="'cudnn' cannot run here: the positional encoding computes attention logits"):
    transformer_config(config.model, max_len=65)
  config.model.pos_encoding = 'alibi'
  transformer_config(config.model, max_len=65)


# (input shape, kernel shape, dimension numbers, whether `dense` computes it): nn.Dense; nn.DenseGeneral onto heads
# and from them; a zero-size contraction; a contraction that is not a projection's, and a batched one, which are
# lax.dot_general's own.
PRODUCTS = [
    ((2, 5, 3), (3, 4), (((2,), (0,)), ((), ())), True),
    ((2, 5, 6), (6, 2, 3), (((2,), (0,)), ((), ())), True),
    ((2, 5, 2, 3), (2, 3, 6), (((2, 3), (0, 1)), ((), ())), True),
    ((2, 5, 0), (0, 4), (((2,), (0,)), ((), ())), True),
    ((3, 5), (4, 3), (((0,), (1,)), ((), ())), False),
    ((2, 5, 3), (2, 3, 4), (((2,), (1,)), ((0,), (0,))), False),
]


def takes_dense_product(fn, *args) -> bool:
  return any(eqn.primitive.name == 'custom_vjp_call' for eqn in jax.make_jaxpr(fn)(*args).jaxpr.eqns)


@pytest.mark.parametrize('input_shape,kernel_shape,dimension_numbers,ours', PRODUCTS)
@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_the_projections_product_and_its_gradients_are_jaxs_own(input_shape, kernel_shape, dimension_numbers, ours,
                                                                 dtype):
  rng = np.random.default_rng(0)
  inputs, kernel = (jnp.asarray(rng.normal(size=shape), dtype) for shape in (input_shape, kernel_shape))
  product = lambda x, k: dense.dense_dot_general(x, k, dimension_numbers)
  assert takes_dense_product(product, inputs, kernel) == ours
  result, result_vjp = jax.vjp(product, inputs, kernel)
  jaxs, jaxs_vjp = jax.vjp(lambda x, k: jax.lax.dot_general(x, k, dimension_numbers), inputs, kernel)
  cotangent = jnp.asarray(rng.normal(size=jaxs.shape), dtype)
  tolerance = 1e-6 if dtype == jnp.float32 else 2e-2
  assert result.shape == jaxs.shape and result.dtype == jaxs.dtype
  np.testing.assert_allclose(np.float32(result), np.float32(jaxs), rtol=tolerance, atol=tolerance)
  for our_gradient, jax_gradient in zip(result_vjp(cotangent), jaxs_vjp(cotangent)):
    assert our_gradient.shape == jax_gradient.shape and our_gradient.dtype == jax_gradient.dtype
    np.testing.assert_allclose(np.float32(our_gradient), np.float32(jax_gradient), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize('layer,ours', [
    (nn.Dense(4, dot_general=dense.dense_dot_general), True),
    (nn.DenseGeneral((2, 3), dot_general=dense.dense_dot_general), True),
    (nn.DenseGeneral(4, axis=(-2, -1), dot_general=dense.dense_dot_general), True),
    (nn.DenseGeneral(4, batch_dims=(0,), dot_general=dense.dense_dot_general), False),
])
def test_flax_projections_take_the_dense_product_and_batched_ones_do_not(layer, ours):
  inputs = jnp.ones((2, 5, 6))
  params = layer.init(jax.random.PRNGKey(0), inputs)
  assert takes_dense_product(lambda p: layer.apply(p, inputs), params) == ours


def test_the_projections_kernel_gradient_is_a_product_of_the_inputs_transposed():
  """The reason for `dense`: the kernel's gradient multiplies the inputs, transposed, by the output gradient
  as it is, so nothing that produced the gradient is computed in transposed order."""
  inputs, kernel, cotangent = jnp.ones((2, 5, 3)), jnp.ones((3, 4)), jnp.ones((2, 5, 4))
  product = lambda k: dense.dense_dot_general(inputs, k, (((2,), (0,)), ((), ())))
  jaxpr = jax.make_jaxpr(lambda k, g: jax.vjp(product, k)[1](g))(kernel, cotangent)
  products = [eqn for eqn in jaxpr.jaxpr.eqns if eqn.primitive.name == 'dot_general']
  assert [(eqn.invars[0].aval.shape, eqn.invars[1].aval.shape) for eqn in products
          if eqn.outvars[0].aval.shape == kernel.shape] == [((3, 10), (10, 4))]
