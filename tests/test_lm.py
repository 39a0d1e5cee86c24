"""Causal language modelling: the decoder-only model, its text pipeline, its config and its training."""
import dataclasses
import functools
import gzip
import hashlib
import json
import math
import os
import re
import urllib.error
import zipfile

import jax
import flax.linen as nn
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import scipy.stats

from configs.lm import shakespeare_char
from lra_posenc import encodings
from lra_posenc.lm import input_pipeline, length_figure, sample, scoring, settings, train
from lra_posenc.lm.input_pipeline import TokenSplit, Vocabulary
from lra_posenc.models import decoding
from lra_posenc.models.language_model import LanguageModel
from lra_posenc.models.transformer import Decoder, TransformerConfig
from lra_posenc.studies import trained_at_length
from lra_posenc.tasks import TASKS
from lra_posenc.training import distributed, trainer
from lra_posenc.training.batches import HostShard
from lra_posenc.training.settings import learning_rate_schedule, read_optimizer_settings

SHAKESPEARE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), '..', 'shared', 'data',
                           'tinyshakespeare', 'input.txt')


def small_model(pos_encoding: str, *, max_len: int = 16, vocab_size: int = 11, **overrides) -> LanguageModel:
  cfg = TransformerConfig(emb_dim=16, num_heads=2, num_layers=2, qkv_dim=16, mlp_dim=32, dropout_rate=0.0,
                          attention_dropout_rate=0.0, pos_encoding=pos_encoding,
                          pos_encoding_options=encodings.REGISTRY[pos_encoding].Options(), max_len=max_len,
                          use_bias=False, init_std=0.02)
  return LanguageModel(dataclasses.replace(cfg, **overrides), vocab_size=vocab_size)


def random_params(model: LanguageModel, tokens: jax.Array) -> dict:
  """Parameters far from initialisation (every leaf perturbed), so that biases and gates are not at their
  symmetric starting values."""
  params = model.init(jax.random.PRNGKey(0), tokens, train=False)['params']
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
  return jax.tree.unflatten(tree, [leaf + 0.3 * jax.random.normal(key, leaf.shape) for leaf, key in zip(leaves, keys)])


def tokens(length: int = 12) -> jax.Array:
  return jax.random.randint(jax.random.PRNGKey(2), (2, length), 1, 11)


# The model.

@pytest.mark.parametrize('pos_encoding', list(encodings.REGISTRY))
def test_changing_a_later_token_changes_no_earlier_logit(pos_encoding):
  model = small_model(pos_encoding)
  before_tokens = tokens()
  params = random_params(model, before_tokens)
  changed = before_tokens.at[:, 7].set(before_tokens[:, 7] % 10 + 1)
  before = model.apply({'params': params}, before_tokens, train=False)
  after = model.apply({'params': params}, changed, train=False)
  # Logits at t read tokens up to t: those before 7 are computed from the same numbers. Exact for every encoding
  # but those whose terms sum over keys (masked ones add exact zeros, yet XLA may sum in another order).
  np.testing.assert_allclose(before[:, :7], after[:, :7], rtol=0, atol=1e-6)
  assert np.abs(before[:, 7:] - after[:, 7:]).max() > 1e-3  # The change is seen from position 7 on.


@pytest.mark.slow
@pytest.mark.parametrize('pos_encoding', list(encodings.REGISTRY))
def test_cached_generation_steps_equal_the_full_forward_pass(pos_encoding):
  model = small_model(pos_encoding)
  inputs = tokens()
  params = random_params(model, inputs)
  full = model.apply({'params': params}, inputs, train=False)
  stepper = model.clone(decode=True)
  cache = stepper.init(jax.random.PRNGKey(0), jnp.ones((2, model.config.max_len), jnp.int32), train=False)['cache']
  cache = jax.tree.map(jnp.zeros_like, cache)
  step = jax.jit(functools.partial(stepper.apply, train=False, mutable=['cache']))
  stepwise = []
  for t in range(inputs.shape[1]):
    logits, updated = step({'params': params, 'cache': cache}, inputs[:, t:t + 1])
    cache = updated['cache']
    stepwise.append(logits[:, 0])
  # Same float32 arithmetic in another order; logits are O(1).
  np.testing.assert_allclose(jnp.stack(stepwise, axis=1), full, atol=2e-5)


def test_the_parameters_are_nanogpts_for_its_cpu_recipe():
  """nanoGPT's GPT at n_layer 4, n_embd 128, block 64, bias False: per block c_attn 128 x 384 and c_proj
  128 x 128, c_fc 128 x 512 and c_proj 512 x 128, two LayerNorm weights; wte (tied to lm_head), wpe, ln_f.
  The vocabulary here is Tiny Shakespeare's 65 characters and the unknown one."""
  config = shakespeare_char.get_config('cpu')
  config.data.text_file = 'unused'
  model = settings.read_settings(config).model.clone(vocab_size=66)
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 64), jnp.int32), train=False)['params']
  d, layers = 128, 4
  per_block = d * 3 * d + d * d + d * 4 * d + 4 * d * d + 2 * d
  assert sum(x.size for x in jax.tree.leaves(params)) == layers * per_block + 66 * d + 64 * d + d
  assert not [path for path, _ in jax.tree_util.tree_leaves_with_path(params) if 'bias' in jax.tree_util.keystr(path)]


def test_kernels_start_as_gpt2s():
  """N(0, 0.02), and N(0, 0.02 / sqrt(2 layers)) for the projections into the residual stream."""
  model = small_model('learned', emb_dim=64, qkv_dim=64, mlp_dim=256)
  params = model.init(jax.random.PRNGKey(0), tokens(), train=False)['params']
  block = params['decoder']['block_0']
  residual_std = 0.02 / math.sqrt(2 * 2)
  for kernel, std in ((block['self_attention']['query']['kernel'], 0.02), (block['MlpBlock_0']['Dense_0']['kernel'], 0.02),
                      (block['self_attention']['out']['kernel'], residual_std),
                      (block['MlpBlock_0']['Dense_1']['kernel'], residual_std),
                      (params['embed']['embedding'], 0.02)):
    # Within 5 standard errors of a std estimated from n draws (about std / sqrt(2n)).
    assert abs(float(kernel.std()) - std) < 5 * std / math.sqrt(2 * kernel.size)


@pytest.mark.parametrize('scaling, entry_std, lookup_scale', [('none', 0.02, 1.0), ('sqrt_dim', 1 / 8, 8.0)])
def test_embeddings_enter_as_their_scaling_says_and_the_logits_are_tied(scaling, entry_std, lookup_scale):
  """'none': entries N(0, init_std) enter as they are; 'sqrt_dim' (d 64): entries N(0, 1/8) enter times 8.
  Either way the logits are the decoder's final states times the table, transposed."""
  model = small_model('sinusoidal', emb_dim=64, qkv_dim=64, mlp_dim=128).clone(embedding_scaling=scaling)
  ids = tokens()
  table = model.init(jax.random.PRNGKey(0), ids, train=False)['params']['embed']['embedding']
  assert abs(float(table.std()) - entry_std) < 5 * entry_std / math.sqrt(2 * table.size)
  params = random_params(model, ids)
  seen = {}

  def capture(call, args, kwargs, context):
    out = call(*args, **kwargs)
    if isinstance(context.module, Decoder) and context.method_name == '__call__':
      seen['inputs'], seen['states'] = args[0], out
    return out

  with nn.intercept_methods(capture):
    logits = model.apply({'params': params}, ids, train=False)
  table = params['embed']['embedding']
  np.testing.assert_allclose(seen['inputs'], table[ids] * lookup_scale, rtol=1e-6)
  np.testing.assert_allclose(logits, seen['states'] @ table.T, rtol=1e-4, atol=1e-4)


# Text.

def test_the_character_vocabulary_is_the_training_texts_and_counts_what_it_lacks():
  vocabulary = Vocabulary.from_training_text('char', 'banana')
  assert (vocabulary.symbols, vocabulary.size) == ('abn', 4)
  ids, unknown = vocabulary.encode('bandana!')
  np.testing.assert_array_equal(ids, [2, 1, 3, 0, 1, 3, 1, 0])
  assert unknown == 2
  assert vocabulary.decode(ids) == 'ban\ufffdana\ufffd'
  assert Vocabulary.from_artifact(json.loads(json.dumps(vocabulary.to_artifact()))) == vocabulary


def test_characters_beyond_the_basic_plane_keep_their_order():
  text = 'zé😀a€'
  vocabulary = Vocabulary.from_training_text('char', text)
  ids, unknown = vocabulary.encode(text)
  assert unknown == 0 and vocabulary.decode(ids) == text
  assert [vocabulary.symbols[i - 1] for i in sorted(ids)] == sorted(text)


def test_bytes_read_any_text():
  vocabulary = Vocabulary.from_training_text('byte', 'ab')
  ids, unknown = vocabulary.encode('é!')
  assert (vocabulary.size, unknown) == (257, 0)
  np.testing.assert_array_equal(ids, [0xC3 + 1, 0xA9 + 1, ord('!') + 1])
  assert vocabulary.decode(ids) == 'é!'


def test_one_file_is_cut_as_nanogpt_cuts_it(tmp_path):
  path = tmp_path / 'input.txt'
  path.write_text('0123456789' * 3)
  splits = input_pipeline.read_splits(str(path), '', 0.1)
  assert splits['train'][1] == ('0123456789' * 3)[:27] and splits['validation'][1] == '789'
  assert 'first 27 characters' in splits['train'][0]


def test_a_directory_holds_train_valid_and_test_gzipped_or_not(tmp_path):
  (tmp_path / 'train.txt').write_text('abc')
  (tmp_path / 'valid.txt').write_text('ab')
  with gzip.open(tmp_path / 'test.txt.gz', 'wt') as f:
    f.write('ca')
  splits = input_pipeline.read_splits('', str(tmp_path), 0.1)
  assert {name: text for name, (_, text) in splits.items()} == {'train': 'abc', 'validation': 'ab', 'test': 'ca'}


def test_text_that_is_not_utf8_is_refused_at_its_line(tmp_path):
  path = tmp_path / 'bad.txt'
  path.write_bytes(b'line one\nline \xff two\n')
  with pytest.raises(ValueError, match=r'bad\.txt:2: not UTF-8'):
    input_pipeline.read_text(str(path))


@pytest.mark.parametrize('text', ['', 'short'])
def test_a_text_shorter_than_a_window_is_refused_naming_the_file_and_the_length(tmp_path, text):
  path = tmp_path / 'input.txt'
  path.write_text(text)
  config = training_config(str(path), steps=1)
  with pytest.raises(ValueError, match=rf'input\.txt \(first {int(len(text) * 0.9)} characters\): '
                                       rf'{int(len(text) * 0.9)} tokens, but .* needs at least 9'):
    train.create_task(config, str(tmp_path / 'workdir'))


def test_scoring_windows_predict_every_token_but_the_first_once():
  ids = np.arange(1, 24, dtype=np.int32)  # 23 tokens: 22 targets, windows of 5: four full, one of 2.
  windows = TokenSplit('test', ids, 0).scoring_windows(5)
  mask = windows.arrays['mask'].astype(bool)
  assert windows.size == 5 and mask.sum() == 22
  np.testing.assert_array_equal(windows.arrays['targets'][mask], ids[1:])
  np.testing.assert_array_equal(windows.arrays['inputs'][mask], ids[:-1])


def test_training_windows_are_a_function_of_seed_and_index_and_hosts_split_them():
  split = TokenSplit('train', np.arange(100, dtype=np.int32), 0)
  batches = split.train_batches(8, 6, seed=3, start=0, shard=HostShard(0, 1))
  first, second = next(batches), next(batches)
  resumed = next(split.train_batches(8, 6, seed=3, start=1, shard=HostShard(0, 1)))
  np.testing.assert_array_equal(resumed['inputs'], second['inputs'])
  np.testing.assert_array_equal(first['targets'], first['inputs'] + 1)  # The next token of each.
  assert first['inputs'].shape == (8, 6) and first['inputs'].max() <= 98  # The last window ends at the last token.
  halves = [next(split.train_batches(8, 6, seed=3, start=1, shard=HostShard(host, 2)))['inputs'] for host in (0, 1)]
  np.testing.assert_array_equal(np.concatenate(halves), second['inputs'])


# The config.

def training_config(text_file: str, *, steps: int, pos_encoding: str = 'learned') -> ml_collections.ConfigDict:
  """The `:cpu` recipe at toy size: windows of 8 characters, a model of 1 layer and width 16."""
  config = shakespeare_char.get_config('cpu')
  config.data.text_file = text_file
  config.data.block_size = 8
  config.model.update(emb_dim=16, qkv_dim=16, mlp_dim=32, num_heads=2, num_layers=1, pos_encoding=pos_encoding)
  config.optimizer.update(warmup_steps=2, learning_rate=1e-2)
  config.training.update(batch_size=4, num_train_steps=steps, log_every_steps=5)
  config.evaluation.update(batch_size=8, every_steps=5)
  config.checkpoint.update(every_steps=5)
  return config


def test_config_variants_read_and_bad_keys_are_named():
  for variant in shakespeare_char.VARIANTS:
    config = shakespeare_char.get_config(variant)
    config.data.text_file = 'input.txt'
    settings.read_settings(config)
  config = shakespeare_char.get_config('cpu')
  with pytest.raises(ValueError, match='set exactly one of data.text_file'):
    settings.read_settings(config)
  config.data.text_file = 'input.txt'
  config.data.level = 'word'
  with pytest.raises(ValueError, match=r"data.level='word' is not one of \['char', 'byte'\]"):
    settings.read_settings(config)
  config.data.level = 'char'
  config.data.tokens = 1
  with pytest.raises(ValueError, match=r'data.tokens is not a config key the code reads; valid keys of data: '
                                       r"\['text_file', 'data_dir', 'level', 'block_size', 'validation_fraction', "
                                       r"'passkey_fraction', 'passkey_length'\]"):
    settings.read_settings(config)
  del config.data.tokens
  config.evaluation.selection_metric = 'loss'
  with pytest.raises(ValueError, match=r"evaluation.selection_metric='loss' is not one of \['log_likelihood'"):
    settings.read_settings(config)
  config.evaluation.selection_metric = 'log_likelihood'
  config.model.randomized_positions = 32
  with pytest.raises(ValueError, match='model.randomized_positions=32 must be 0 .* at least data.block_size=64'):
    settings.read_settings(config)
  config.model.randomized_positions = 0
  config.model.embedding_scaling = 'sqrt'
  with pytest.raises(ValueError, match=r"model.embedding_scaling='sqrt' is not one of \['none', 'sqrt_dim'\]"):
    settings.read_settings(config)


def test_the_models_own_keys_are_its_fields_and_reach_it_and_a_missing_one_is_named():
  config = shakespeare_char.get_config('cpu')
  config.data.text_file = 'input.txt'
  config.model.update(randomized_positions=256, embedding_scaling='sqrt_dim')
  model = settings.read_settings(config).model
  assert settings.OWN_MODEL_KEYS == ('randomized_positions', 'embedding_scaling')
  assert (model.randomized_positions, model.embedding_scaling, model.decode) == (256, 'sqrt_dim', False)
  del config.model.embedding_scaling
  with pytest.raises(ValueError, match=r"model lacks key\(s\) \['embedding_scaling'\]"):
    settings.read_settings(config)
  config.model.embedding_scaling = 'none'
  config.model.decode = True  # A field the task derives is no key.
  with pytest.raises(ValueError, match='model.decode is not a config key the code reads'):
    settings.read_settings(config)


def test_the_cosine_ends_at_the_minimum_learning_rate():
  config = shakespeare_char.get_config('cpu')
  schedule = learning_rate_schedule(read_optimizer_settings(config.optimizer), 2000)
  np.testing.assert_allclose([schedule(0), schedule(50), schedule(100), schedule(1050), schedule(2000)],
                             [0.0, 5e-4, 1e-3, 5.5e-4, 1e-4], rtol=1e-5)
  config.optimizer.schedule = 'rsqrt'
  with pytest.raises(ValueError, match="optimizer.min_learning_rate=0.0001 is where a cosine schedule ends; "
                                       "optimizer.schedule='rsqrt' would not read it"):
    read_optimizer_settings(config.optimizer)


# Training.

@pytest.mark.slow
def test_training_lowers_the_loss_and_reports_characters_outside_the_vocabulary(tmp_path):
  path = tmp_path / 'input.txt'
  path.write_text('abcab' * 200 + 'abcd?' * 4)  # The last 10% (102 characters) holds 'd' and '?' four times each.
  results = trainer.train_and_evaluate(str(tmp_path / 'run'), train.create_task(training_config(str(path), steps=100),
                                                                               str(tmp_path / 'run')))
  history = [json.loads(line) for line in open(tmp_path / 'run' / 'metrics.jsonl')]
  losses = [record['loss'] for record in history if record['prefix'] == 'train']
  assert losses[-1] < losses[0] - 0.3
  assert results['data'] == {'validation_characters_outside_vocabulary': 8}
  assert results['test_sets']['validation']['loss'] == pytest.approx(results['validation']['loss'])
  assert json.load(open(tmp_path / 'run' / 'artifacts.json'))['vocabulary'] == {'level': 'char', 'symbols': 'abc'}


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(SHAKESPEARE), reason=f'{SHAKESPEARE} is absent')
def test_tiny_shakespeare_trains(tmp_path):
  config = training_config(os.path.abspath(SHAKESPEARE), steps=20)
  config.evaluation.every_steps = 20
  results = trainer.train_and_evaluate(str(tmp_path), train.create_task(config, str(tmp_path)))
  assert results['data'] == {'validation_characters_outside_vocabulary': 0}
  assert results['baselines']['uniform_bits_per_token'] == pytest.approx(math.log2(66))
  # Below the 4.19 nats of 66 equiprobable characters after 20 steps of 32 characters.
  assert results['test']['loss'] < math.log(66) - 0.5


@pytest.mark.parametrize('length,stride', [(5, 0), (5, 5), (5, 2), (5, 1), (30, 3)])
def test_sliding_windows_score_every_target_once_with_the_context_they_promise(length, stride):
  ids = np.arange(1, 24, dtype=np.int32)
  windows = TokenSplit('test', ids, 0).scoring_windows(length, stride).arrays
  mask = windows['mask'].astype(bool)
  np.testing.assert_array_equal(np.sort(windows['targets'][mask]), ids[1:])  # Each once.
  np.testing.assert_array_equal(windows['targets'][mask] - 1, windows['inputs'][mask])
  context = np.broadcast_to(np.arange(length), mask.shape)[mask]  # Tokens before a target in its window.
  first_window = np.zeros_like(mask)
  first_window[0] = True
  assert (context[~first_window[mask]] >= length - (stride or length)).all()


# Scoring past the training length.

@pytest.mark.slow
def test_scores_by_length_agree_with_the_trainers_and_name_what_they_cannot_measure(tmp_path):
  path = tmp_path / 'input.txt'
  path.write_text(''.join(chr(97 + (i * i) % 7) for i in range(600)))
  results = {}
  for pos_encoding in ('learned', 'rope'):
    config = training_config(str(path), steps=10, pos_encoding=pos_encoding)
    config.scoring.length_multiples = (1, 2, 4)
    workdir = str(tmp_path / pos_encoding)
    results[pos_encoding] = trainer.train_and_evaluate(workdir, train.create_task(config, workdir))['test']
  for pos_encoding, test in results.items():
    # Windows of the training length, non-overlapping: the evaluation step's scores, computed another way.
    assert test['by_length']['8']['loss'] == pytest.approx(test['loss'], rel=1e-5)
    assert test['by_length']['8']['tokens'] == 59  # The last 10% of 600 characters: 60, all but the first scored.
    assert len(test['by_length']['8']['loss_by_position']) == 8
  learned, rope = results['learned'], results['rope']
  assert learned['by_length']['16'] == {
      'not_measured': 'learned positional encoding covers 8 positions but the input has 16; learned cannot '
                      'extrapolate beyond max_len'}
  assert set(rope['by_length']) == {'8', '16', '32'} and 'loss' in rope['by_length']['32']
  assert (set(rope['by_length_interpolation_factor']) == set(rope['by_length_ntk_factor'])
          == set(rope['by_length_yarn_factor']) == {'16', '32'})
  assert 'by_length_ntk_factor' not in learned
  # Position interpolation by 2 halves every angle: another function than the unscaled model's at 16.
  assert rope['by_length_interpolation_factor']['16']['loss'] != rope['by_length']['16']['loss']
  # As a row of sweep and summary tables: a figure per length and stretch; None where not measured.
  columns = scoring.recorded_columns({'test_sets': {'validation': rope}, 'config': config.to_dict()})
  assert columns['validation loss at 32'] == rope['by_length']['32']['loss']
  assert columns['validation loss at 16 ntk_factor'] == rope['by_length_ntk_factor']['16']['loss']
  assert columns['validation extrapolation at 32'] == pytest.approx(
      rope['by_length']['32']['loss'] - rope['by_length']['8']['loss'])
  # Positions 8-31 of windows of 32 (bins of one position) against positions 4-7 of windows of 8.
  far = rope['by_length']['32']['loss_by_position'][8:]
  near = rope['by_length']['8']['loss_by_position'][4:]
  assert columns['validation far-context gain at 32'] == pytest.approx(np.mean(far) - np.mean(near))
  assert len(columns) == 3 + 2 + 2 + 2 + 2 * 2
  learned_columns = scoring.recorded_columns({'test_sets': {'validation': learned}, 'config': config.to_dict()})
  assert learned_columns['validation extrapolation at 16'] is None
  assert learned_columns['validation far-context gain at 32'] is None
  assert learned_columns['validation loss at 16'] is None


def test_randomized_positions_are_scored_at_drawn_positions_and_at_sequential_ones():
  ids = np.asarray(jax.random.randint(jax.random.PRNGKey(3), (70,), 1, 11), np.int32)
  split = TokenSplit('valid', ids, 0)
  scores = {}
  for randomized in (8, 32):  # Windows of 8 at 8 drawn positions of [0, 8) are 0 ... 7: nothing to draw.
    model = small_model('rope', max_len=randomized).clone(randomized_positions=randomized)
    params = distributed.replicate(random_params(model, tokens(8)))
    scorer = scoring.LengthScorer(model, 8, (1,), 0, 4, (), drawn_positions=True, position_draws=3)
    scores[randomized] = scorer.score(params, split, 'test')
  same, drawn = scores[8], scores[32]
  assert same['by_length']['8']['loss'] == pytest.approx(same['by_length_sequential']['8']['loss'], rel=1e-6)
  assert drawn['by_length']['8']['loss'] != pytest.approx(drawn['by_length_sequential']['8']['loss'], rel=1e-3)
  assert drawn['by_length']['8']['position_draws'] == 3
  assert drawn['by_length']['8']['tokens'] == drawn['by_length_sequential']['8']['tokens'] == 69
  # Another draw count averages other draws; the sequential reading is the same.
  model = small_model('rope', max_len=32).clone(randomized_positions=32)
  params = distributed.replicate(random_params(model, tokens(8)))
  one = scoring.LengthScorer(model, 8, (1,), 0, 4, (), drawn_positions=True, position_draws=1).score(
      params, split, 'test')
  assert one['by_length']['8']['loss'] != pytest.approx(drawn['by_length']['8']['loss'], rel=1e-4)
  assert one['by_length_sequential'] == drawn['by_length_sequential']
  # 'sequential' scoring: the reading before, alone.
  sequential = scoring.LengthScorer(model, 8, (1,), 0, 4, (), drawn_positions=False).score(params, split, 'test')
  assert set(sequential) == {'by_length'}
  assert sequential['by_length']['8'] == drawn['by_length_sequential']['8']


@pytest.mark.parametrize('key, value, error', [
    ('positions', 'random', r"scoring.positions='random' is not one of \['drawn', 'sequential'\]"),
    ('position_draws', 0, r'scoring.position_draws=0 must be >= 1'),
])
def test_bad_randomized_scoring_settings_are_refused_naming_the_key(key, value, error):
  config = shakespeare_char.get_config('cpu')
  config.data.text_file = 'input.txt'
  config.scoring[key] = value
  with pytest.raises(ValueError, match=error):
    settings.read_settings(config)


def test_old_configs_read_as_scored_at_sequential_positions():
  config = shakespeare_char.get_config('cpu').to_dict()
  del config['scoring']['positions'], config['scoring']['position_draws']
  settings.CONFIG_HISTORY[settings.TASK].upgrade(config)
  assert config['scoring']['positions'] == 'sequential'


def test_every_t5_bucket_is_trained_in_a_cpu_window_and_128_left_five_untrained():
  config = shakespeare_char.get_config('cpu')
  config.data.text_file = 'input.txt'
  config.model.update(pos_encoding='t5', num_layers=1)
  block = config.data.block_size
  ids = jax.random.randint(jax.random.PRNGKey(4), (2, block), 1, 66)
  untrained = {}
  for max_distance in (0, 128):  # 0: the default, the training window.
    config.model.pos_encoding_options.t5.max_distance = max_distance
    model = settings.read_settings(config).model.clone(vocab_size=66)
    params = model.init(jax.random.PRNGKey(0), ids, train=False)['params']
    loss = lambda p: model.apply({'params': p}, ids, train=False).std()
    bias_grad = jax.grad(loss)(params)['decoder']['pos_encoding']['relative_bias']  # [buckets, heads]
    untrained[max_distance] = np.flatnonzero(np.all(np.asarray(bias_grad) == 0, axis=1)).tolist()
  assert untrained == {0: [], 128: [27, 28, 29, 30, 31]}


def test_fires_normalisation_acts_inside_a_cpu_window():
  config = shakespeare_char.get_config('cpu')
  config.data.text_file = 'input.txt'
  config.model.pos_encoding = 'fire'
  block = config.data.block_size
  positions = jnp.arange(block)[None]
  biases = {}
  for threshold in (0.0, 512.0):  # 0: the default, a quarter of the training window.
    config.model.pos_encoding_options.fire.init_threshold = threshold
    cfg = settings.read_settings(config).model.config
    module = encodings.create('fire', cfg.pos_encoding_options, max_len=cfg.max_len, dim=cfg.emb_dim,
                              num_heads=cfg.num_heads, head_dim=cfg.head_dim)
    params = module.init(jax.random.PRNGKey(0), positions, positions, causal=True, method='attention_terms')
    biases[threshold] = np.asarray(module.apply(params, positions, positions, causal=True,
                                                method='attention_terms').bias[0])
  # The bias at distance 5 from queries 8 (below the threshold, 16) and 63: the same while the distance alone
  # decides (512), another once the query's position normalises it.
  at = lambda bias, query: bias[:, query, query - 5]
  np.testing.assert_array_equal(at(biases[512.0], 8), at(biases[512.0], 63))
  assert np.abs(at(biases[0.0], 8) - at(biases[0.0], 63)).min() > 1e-4
  np.testing.assert_array_equal(at(biases[0.0], 8), at(biases[0.0], 15))  # Below the threshold: relative.


# Generation.

@pytest.mark.slow
def test_sampling_at_temperature_0_is_the_full_forward_passs_argmax_and_seeds_fix_draws(tmp_path):
  path = tmp_path / 'input.txt'
  path.write_text(''.join(chr(97 + (i * i) % 7) for i in range(600)))
  workdir = str(tmp_path / 'run')
  trainer.train_and_evaluate(workdir, train.create_task(training_config(str(path), steps=10, pos_encoding='alibi'),
                                                        workdir))
  sampler = sample.Sampler.from_workdir(workdir)
  context = sampler.model.config.max_len  # 8: 'ab' and 18 tokens fill it, then re-start from its last 4, twice.
  ids = list(sampler.vocabulary.encode('ab')[0])
  while len(ids) < 20:  # Without a cache: the whole window through the model for each token.
    window = ids[-context // 2:] if len(ids) >= context else ids
    for _ in range(min(context - len(window), 20 - len(ids))):
      logits = sampler.model.apply({'params': sampler.params}, jnp.asarray([window]), train=False)
      window = window + [int(jnp.argmax(logits[0, -1]))]
      ids.append(window[-1])
  assert sampler.sample('ab', num_tokens=18, temperature=0) == [sampler.vocabulary.decode(np.asarray(ids))]
  drawn = sampler.sample('ab', num_tokens=18, num_samples=2, seed=3)
  assert drawn == sampler.sample('ab', num_tokens=18, num_samples=2, seed=3) and all(len(t) == 20 for t in drawn)
  with pytest.raises(ValueError, match="the prompt has 1 character"):
    sampler.sample('a!', num_tokens=2)


def test_top_k_keeps_the_k_most_likely_and_temperature_0_the_most_likely():
  logits = jnp.log(jnp.asarray([[0.1, 0.5, 0.15, 0.25]]))
  draws = jax.vmap(lambda key: decoding.sample_logits(key, logits, temperature=1.0, top_k=2))(
      jax.random.split(jax.random.PRNGKey(0), 4000))
  # Only ids 1 and 3, in the ratio 0.5 : 0.25 (4000 draws: the share of id 1 within 4 standard errors of 2/3).
  assert set(np.unique(draws)) == {1, 3}
  assert abs(float((draws == 1).mean()) - 2 / 3) < 4 * math.sqrt(2 / 9 / 4000)
  assert int(decoding.sample_logits(jax.random.PRNGKey(0), logits, temperature=0, top_k=0)[0]) == 1


def test_at_byte_level_a_file_is_read_as_bytes_even_where_a_cut_splits_a_character(tmp_path):
  (tmp_path / 'train.txt').write_bytes('é'.encode('utf-8')[:1] + b'ab')  # A cut UTF-8 character, as in enwik8.
  (tmp_path / 'valid.txt').write_bytes(b'\xff')
  (tmp_path / 'test.txt').write_bytes(b'a')
  splits = input_pipeline.read_splits('', str(tmp_path), 0.1, 'byte')
  ids = input_pipeline.tokenize_splits(splits, Vocabulary.from_training_text('byte', splits['train'][1]))
  np.testing.assert_array_equal(ids['train'].ids, [0xC3 + 1, ord('a') + 1, ord('b') + 1])
  np.testing.assert_array_equal(ids['validation'].ids, [0xFF + 1])


def test_the_download_script_writes_the_standard_splits_of_a_zip_and_refuses_another_size(tmp_path):
  import download_lm_data
  corpus = bytes(range(256)) * 4  # 1024 bytes standing for the 10^8 of enwik8.
  archive = tmp_path / 'enwik8.zip'
  with zipfile.ZipFile(archive, 'w') as zipped:
    zipped.writestr('enwik8', corpus)
  data = download_lm_data.read_corpus(str(archive), 'enwik8', 1024)
  assert download_lm_data.write_splits(data, str(tmp_path / 'out'), held_out=100) == {
      'train.txt': 824, 'valid.txt': 100, 'test.txt': 100}
  assert (tmp_path / 'out' / 'train.txt').read_bytes() + (tmp_path / 'out' / 'valid.txt').read_bytes() + (
      tmp_path / 'out' / 'test.txt').read_bytes() == corpus
  assert (tmp_path / 'out' / 'valid.txt').read_bytes() == corpus[824:924]
  with pytest.raises(ValueError, match=r'enwik8 holds 1024 bytes, but the standard corpus has 100000000'):
    download_lm_data.read_corpus(str(archive), 'enwik8', 100_000_000)
  with pytest.raises(ValueError, match=r"not a zip holding 'text8'"):
    download_lm_data.read_corpus(str(archive), 'text8', 1024)


def test_the_download_script_writes_a_text_corpus_checked_by_its_md5(tmp_path, monkeypatch, capsys):
  import download_lm_data
  text = b'First Citizen:\nBefore we proceed any further, hear me speak.\n'
  (tmp_path / 'copy.txt').write_bytes(text)
  monkeypatch.setitem(download_lm_data.TEXTS, 'warpeace', (None, hashlib.md5(text).hexdigest()))
  download_lm_data.main(['--corpus=warpeace', f'--output_dir={tmp_path / "out"}', f'--source={tmp_path / "copy.txt"}'])
  assert (tmp_path / 'out' / 'input.txt').read_bytes() == text
  monkeypatch.setitem(download_lm_data.TEXTS, 'warpeace', (None, '0' * 32))
  with pytest.raises(ValueError, match=r'copy.txt: MD5 \w+, but the corpus has 0{32}: another text'):
    download_lm_data.main(['--corpus=warpeace', f'--output_dir={tmp_path / "bad"}',
                           f'--source={tmp_path / "copy.txt"}'])
  assert not (tmp_path / 'bad' / 'input.txt').exists()
  with pytest.raises(SystemExit):  # No URL serves it: a copy is needed.
    download_lm_data.main(['--corpus=warpeace', f'--output_dir={tmp_path / "none"}'])
  assert '--corpus=warpeace is not served where this script can fetch it' in capsys.readouterr().err


def test_a_download_without_a_network_is_one_line_naming_the_address_and_the_copy_option(tmp_path, monkeypatch):
  import download_lm_data
  def unreachable(url, timeout):
    raise urllib.error.URLError(OSError(-2, 'Name or service not known'))
  monkeypatch.setattr(download_lm_data.urllib.request, 'urlopen', unreachable)
  url = download_lm_data.TEXTS['tinyshakespeare'][0]
  with pytest.raises(SystemExit, match=rf'^error: could not download {re.escape(url)} \(.*Name or service not known'
                                       r'\); .* --source \(or --archive\)$'):
    download_lm_data.main(['--corpus=tinyshakespeare', f'--output_dir={tmp_path}'])

  class CutOff:  # The connection drops while the body is read.
    def __enter__(self):
      return self

    def __exit__(self, *exception):
      return False

    def read(self):
      raise ConnectionResetError(104, 'Connection reset by peer')
  monkeypatch.setattr(download_lm_data.urllib.request, 'urlopen', lambda url, timeout: CutOff())
  with pytest.raises(SystemExit, match=r'could not download .* \(\[Errno 104\] Connection reset by peer\)'):
    download_lm_data.main(['--corpus=tinyshakespeare', f'--output_dir={tmp_path}'])
  assert os.listdir(tmp_path) == []  # Nothing half-written.


@pytest.mark.skipif(not os.path.exists(SHAKESPEARE), reason=f'{SHAKESPEARE} is absent')
def test_the_shared_tiny_shakespeare_is_the_corpus_the_script_fetches(tmp_path):
  import download_lm_data
  download_lm_data.main(['--corpus=tinyshakespeare', f'--output_dir={tmp_path}', f'--source={SHAKESPEARE}'])
  assert (tmp_path / 'input.txt').stat().st_size == 1_115_394


def test_the_length_figure_averages_each_variants_seeds_per_length_and_skips_what_was_not_measured(tmp_path):
  def write(variant, seed, by_length, **stretched):
    run = tmp_path / 'runs' / variant / f'seed_{seed}'
    os.makedirs(run)
    scores = {'loss': 1.0, 'by_length': by_length} | {f'by_length_{k}': v for k, v in stretched.items()}
    (run / 'results.json').write_text(json.dumps({'test_sets': {'validation': scores}}))

  write('rope', 0, {'8': {'loss': 1.0}, '16': {'loss': 2.0}}, ntk_factor={'16': {'loss': 1.5}})
  write('rope', 1, {'8': {'loss': 1.2}, '16': {'loss': 2.4}}, ntk_factor={'16': {'loss': 1.7}})
  write('learned', 0, {'8': {'loss': 1.1}, '16': {'not_measured': 'learned cannot extrapolate'}})
  os.makedirs(tmp_path / 'runs' / 'alibi' / 'seed_0')  # Started, not finished: no results.json.
  lines = length_figure.curves(str(tmp_path / 'runs'), 'validation')
  assert lines == {'learned': {8: [1.1]}, 'rope': {8: [1.0, 1.2], 16: [2.0, 2.4]},
                   'rope, ntk_factor stretched': {16: [1.5, 1.7]}}
  figures = length_figure.summary(lines)
  assert figures['rope']['16']['mean'] == pytest.approx(2.2)
  assert figures['rope']['16']['std'] == pytest.approx(np.std([2.0, 2.4], ddof=1))
  output = tmp_path / 'figure.png'
  length_figure.main(['--runs', str(tmp_path / 'runs'), '--output', str(output)])
  assert output.stat().st_size > 0
  assert json.loads((tmp_path / 'figure.json').read_text()) == json.loads(json.dumps(figures))
  with pytest.raises(ValueError, match="no test split 'test'"):
    length_figure.curves(str(tmp_path / 'runs'), 'test')
  # Panels by what the encoding's terms are, not by its name.
  assert [length_figure.family(label) for label in ('rope, ntk_factor stretched', 'xpos', 'alibi', 'dape', 'cope',
                                                     'learned', 'none', 'sinusoidal:model.randomized_positions=64')
          ] == ['rotary', 'rotary', 'bias', 'content', 'content', 'absolute', 'absolute', 'absolute']
  length_figure.main(['--runs', str(tmp_path / 'runs'), '--output', str(output), '--exclude=learned',
                      '--plain_stretches'])
  assert set(json.loads((tmp_path / 'figure.json').read_text())) == {'rope', 'rope, ntk_factor stretched'}


def test_the_trained_at_length_table_sets_each_encodings_runs_at_l_beside_its_runs_at_kl(tmp_path):
  def write(study, variant, seed, block_size, losses):
    run = tmp_path / study / variant / f'seed_{seed}'
    os.makedirs(run)
    scores = {'loss': losses[block_size], 'bits_per_token': 1.0,  # Two bins of the loss by position each.
              'by_length': {str(length): {'loss': loss, 'loss_by_position': [loss, loss],
                                          'position_bin_starts': [0, length // 2]}
                            for length, loss in losses.items()}}
    (run / 'results.json').write_text(json.dumps({
        'config': {'data': {'block_size': block_size}}, 'test_sets': {'validation': scores},
        'validation': {'log_likelihood': -losses[block_size]}, 'best_step': 10, 'step': 10}))

  for seed, (short, long) in enumerate([(2.0, 1.5), (2.2, 1.7), (2.1, 1.4)]):
    write('at_l', 'rope', seed, 8, {8: 1.0, 32: short})
    write('at_l', 'rope:kept_frequencies=0.5', seed, 8, {8: 1.0, 32: 9.9})  # Another variant, its own row.
    write('at_kl', 'rope:data.block_size=32:training.batch_size=1', seed, 32, {32: long})
  write('at_kl', 'rope:kept_frequencies=0.5:data.block_size=32:training.batch_size=1', 0, 32, {32: 1.9})
  write('at_l', 'learned', 0, 8, {8: 1.0})  # Cannot be scored at 32: "not measured".
  write('at_kl', 'learned:data.block_size=32:training.batch_size=1', 0, 32, {32: 1.6})
  rows = trained_at_length.rows(TASKS[settings.TASK], str(tmp_path / 'at_l'), str(tmp_path / 'at_kl'))
  assert [(row['encoding'], row['length']) for row in rows] == [
      ('learned', 32), ('rope', 32), ('rope:kept_frequencies=0.5', 32)]
  learned, rope, partial = rows
  assert partial['stats']['at L']['values'] == [9.9] * 3 and partial['welch_missing'] == 'one seed'
  assert rope['stats']['at L']['values'] == [2.0, 2.2, 2.1] and rope['stats']['at kL']['values'] == [1.5, 1.7, 1.4]
  assert rope['delta'] == pytest.approx(2.1 - 1.533333, abs=1e-6)
  assert rope['welch_p'] == pytest.approx(
      scipy.stats.ttest_ind([2.0, 2.2, 2.1], [1.5, 1.7, 1.4], equal_var=False).pvalue)
  assert rope['holm_p'] == rope['welch_p']  # The only test of the family: learned has none.
  assert learned['stats']['at L']['mean'] is None and learned['welch_missing'] == 'not measured'
  table = trained_at_length.markdown(rows)
  assert '| learned | 32 | 0, 1 | not measured | 1.600 | - | not measured |' in table
  assert '| rope | 32 | 3, 3 | 2.100 ± 0.100 | 1.533 ± 0.153 | +0.567 |' in table


def test_nanogpts_printout_is_read_into_its_validation_curve(tmp_path):
  import compare_nanogpt_curves  # noqa: PLC0415 (scripts/)
  log = tmp_path / 'train.log'
  log.write_text('tokens per iteration will be: 768\nstep 0: train loss 4.1697, val loss 4.1662\n'
                 'iter 0: loss 4.1821, time 5ms\nstep 250: train loss 2.4388, val loss 2.4442\n')
  assert compare_nanogpt_curves.nanogpt_curve(str(log)) == {0: 4.1662, 250: 2.4442}
  log.write_text('iter 0: loss 4.1821\n')
  with pytest.raises(ValueError, match='not a nanoGPT train.py printout'):
    compare_nanogpt_curves.nanogpt_curve(str(log))
