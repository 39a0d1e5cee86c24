"""Translation: parallel data, tokenizer, encoder-decoder decoding, training to BLEU, resume."""
import collections
import copy
import functools
import gzip
import io
import itertools
import json
import math
import os
import re
import tarfile

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax.training import train_state

from conftest import final_params, toy_config
from configs.listops import lra
from configs.translation import multi30k
from lra_posenc import encodings
from lra_posenc.data.files import DataError
from lra_posenc.models import decoding as decode
from lra_posenc.models.seq2seq import Seq2SeqTransformer, shift_right
from lra_posenc.models.transformer import transformer_config
from lra_posenc.training import trainer
from lra_posenc.training.batches import ArrayDataset, HostShard
from lra_posenc.training.checkpointing import read_config, restore_best
from lra_posenc.training.distributed import AXIS, device_batches, replicate, stop_requests
from lra_posenc.training.run_files import read_history
from lra_posenc.training.settings import upgrade_old_config
from lra_posenc.training.task import Task
from lra_posenc.training.trainer import (accumulating_train_step, compile_train_steps, create_state, pmapped_steps,
                                         train_step, zero_sums)
from lra_posenc.translation import bleu, input_pipeline, loss, train, translate
from lra_posenc.translation import length_scores as translation_length_scores
from lra_posenc.translation.input_pipeline import BOS_ID, EOS_ID, PAD_ID
from lra_posenc.translation.settings import CONFIG_HISTORY, LossSettings, read_data, read_settings
from lra_posenc.translation.translator import Translator, create_translator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MULTI30K_DIR = os.path.join(ROOT, '..', 'shared', 'data', 'multi30k')
SCRIPTS_DIR = os.path.join(ROOT, 'scripts')


def run(config, workdir, should_stop=None):
  return trainer.train_and_evaluate(str(workdir), train.create_task(config, str(workdir)), should_stop)


def small_model(pos_encoding: str, *, max_len: int = 12, share_embeddings: bool = True, norm_position: str = 'pre',
                activation: str = 'gelu') -> Seq2SeqTransformer:
  model = ml_collections.ConfigDict(dict(
      emb_dim=32, num_heads=4, num_layers=2, qkv_dim=32, mlp_dim=64, dropout_rate=0.0, attention_dropout_rate=0.0,
      activation_dropout_rate=0.0, pos_encoding=pos_encoding, pos_encoding_options=encodings.options_config(),
      dtype='float32', attention_implementation='auto', remat=False, norm_position=norm_position,
      activation=activation))
  return Seq2SeqTransformer(transformer_config(model, max_len=max_len), source_vocab_size=24, target_vocab_size=24,
                            share_embeddings=share_embeddings, bos_id=BOS_ID)


def random_params(model: Seq2SeqTransformer, sources, targets):
  """Initial parameters plus noise, so that biases and tables are not all zero or symmetric."""
  params = model.init(jax.random.PRNGKey(0), sources, targets, train=False)['params']
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
  return jax.tree.unflatten(tree, [p + 0.2 * jax.random.normal(k, p.shape) for p, k in zip(leaves, keys)])


def toy_batch(rows: int = 3, source_length: int = 7, target_length: int = 12):
  rng = np.random.default_rng(0)
  sources = jnp.asarray(rng.integers(4, 24, (rows, source_length))).at[0, 4:].set(PAD_ID)
  return sources, jnp.asarray(rng.integers(4, 24, (rows, target_length)))


# Data.

def trained_tokenizers(directory: str, text, **options) -> input_pipeline.Tokenizers:
  input_pipeline.write_missing_tokenizers(directory, text, **options)
  return input_pipeline.load_tokenizers(directory, joint=options['joint'])


def test_tokenizer_round_trip_and_reuse(toy_corpus, tmp_path):
  text = input_pipeline.read_split(toy_corpus, 'train', 'en', 'de')
  options = dict(joint=True, vocab_size=64, model_type='unigram', character_coverage=1.0)
  tokenizers = trained_tokenizers(str(tmp_path), text, **options)
  assert tokenizers.joint and os.path.exists(tmp_path / 'joint.model')
  for sentence in text.sources[:20] + text.targets[:20] + ['Katze groß Baum']:
    ids = tokenizers.source.encode(sentence)
    assert input_pipeline.decode_ids(tokenizers.target, np.asarray(ids + [EOS_ID, PAD_ID, PAD_ID])) == sentence
  assert {tokenizers.source.piece_to_id(p) for p in ('<pad>', '<unk>', '<s>', '</s>')} == {0, 1, 2, 3}
  # A saved tokenizer is loaded, never retrained: a different training text changes nothing.
  reloaded = trained_tokenizers(str(tmp_path), input_pipeline.ParallelText(['x'], ['y'], 'a', 'b'), **options)
  assert reloaded.fingerprints == tokenizers.fingerprints
  separate = trained_tokenizers(str(tmp_path / 'separate'), text, **options | {'joint': False})
  assert not separate.joint and separate.source.encode('Hund') != separate.target.encode('Hund')


def test_a_lowercasing_tokenizer_reads_any_case_alike_and_keeps_eszett(toy_corpus, tmp_path):
  text = input_pipeline.read_split(toy_corpus, 'train', 'en', 'de')
  cased = input_pipeline.ParallelText([s.title() for s in text.sources], [t.title() for t in text.targets],
                                      'src', 'tgt')
  options = dict(joint=True, vocab_size=64, model_type='unigram', character_coverage=1.0)
  input_pipeline.write_missing_tokenizers(str(tmp_path), cased, lowercase=True, **options)
  tokenizers = input_pipeline.load_tokenizers(str(tmp_path), joint=True, lowercase=True)
  assert tokenizers.fingerprints['lowercase'] is True  # A resume without the option is refused.
  assert 'lowercase' not in trained_tokenizers(str(tmp_path / 'cased'), text, **options).fingerprints
  pieces = {tokenizers.source.id_to_piece(i) for i in range(tokenizers.source.get_piece_size())}
  assert not any(piece != piece.lower() for piece in pieces)  # Trained on lowercased text only.
  for sentence in cased.sources[:10] + cased.targets[:10] + ['Katze GROß Baum']:
    ids = tokenizers.encode_targets([sentence])[0]
    assert ids == tokenizers.encode_targets([sentence.lower()])[0]
    assert ids == tokenizers.encode_sources([sentence.capitalize()])[0]
    # str.lower, not Unicode case folding, which would write ß as ss.
    assert input_pipeline.decode_ids(tokenizers.target, np.asarray(ids + [EOS_ID])) == sentence.lower()
  dataset, _ = input_pipeline.encode_split(cased, tokenizers, split='train', max_length=16, train=True)
  lowered, _ = input_pipeline.encode_split(text, tokenizers, split='train', max_length=16, train=True)
  np.testing.assert_array_equal(dataset.arrays['targets'], lowered.arrays['targets'])


def test_training_filters_and_evaluation_keeps_every_pair(toy_corpus, tmp_path):
  text = input_pipeline.ParallelText(['one two', '', 'one ' * 20, 'red dog'], ['eins zwei', 'leer', 'eins ' * 20, ''],
                                     'src', 'tgt')
  tokenizers = trained_tokenizers(
      str(tmp_path), input_pipeline.read_split(toy_corpus, 'train', 'en', 'de'), joint=True, vocab_size=64,
      model_type='unigram', character_coverage=1.0)
  dataset, report = input_pipeline.encode_split(text, tokenizers, split='train', max_length=8, train=True)
  assert dataset.size == 1 and report.skipped == {'empty': 2, 'too long': 1}
  dataset, report = input_pipeline.encode_split(text, tokenizers, split='test', max_length=8, train=False)
  assert dataset.size == 4 and report.truncated == 1
  assert (dataset.arrays['inputs'][2, -1] == EOS_ID) and (dataset.arrays['lengths'] <= 8).all()


def test_bucketed_batches_are_deterministic_and_cut_to_their_bucket(toy_corpus, tmp_path):
  config = toy_config(toy_corpus)
  task = train.create_task(config, str(tmp_path))
  first = list(itertools.islice(task.train_batches(0), 40))
  again = list(itertools.islice(task.train_batches(25), 15))
  for a, b in zip(first[25:], again):
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
  for batch in first:
    width = batch['inputs'].shape[1]
    assert width in (8, 16) and batch['targets'].shape[1] == width
    assert (batch['lengths'] <= width).all() and (width == 8 or (batch['lengths'] > 8).all())


def shape_of(batch) -> tuple:
  """A batch's (key, shape, dtype) triples, for arrays and shape structs alike."""
  return tuple((key, batch[key].shape, str(batch[key].dtype)) for key in sorted(batch))


def test_token_budget_batches_fill_the_budget_resume_and_split_across_hosts():
  rng = np.random.default_rng(0)
  lengths = rng.integers(1, 33, 500).astype(np.int32)
  ids = np.repeat(np.arange(500, dtype=np.int32)[:, None], 32, axis=1)  # Each row names its example.
  dataset = ArrayDataset({'inputs': ids, 'lengths': lengths})
  buckets, budget, cap, devices = (8, 16, 32), 200, 20, 4
  plan = dict(buckets=buckets, lengths_key='lengths', sequence_keys=('inputs',), seed=3, max_tokens=budget,
              multiple_of=devices)
  batches = functools.partial(dataset.bucketed_train_batches, cap, **plan)
  first = list(itertools.islice(batches(shard=HostShard(0, 1)), 150))
  examples = {}
  for batch in first:
    size, width = batch['inputs'].shape
    examples.setdefault(width, set()).add(size)
    # The most examples, a multiple of the devices, within the budget and the cap.
    assert size % devices == 0 and size * width <= budget and size <= cap
    assert (size + devices) * width > budget or size + devices > cap
    lower = max([0] + [bound for bound in buckets if bound < width])
    assert ((batch['lengths'] > lower) & (batch['lengths'] <= width)).all()
  assert examples == {8: {20}, 16: {12}, 32: {4}}
  seen = np.concatenate([batch['inputs'][:, 0] for batch in first])
  per_epoch = len(dataset._bucketed_epoch(3, 0, (20, 12, 4), buckets, 'lengths'))
  epoch = seen[:sum(len(b['inputs']) for b in first[:per_epoch])]
  assert len(set(epoch.tolist())) == len(epoch)  # No example twice in an epoch.
  assert len(first) > per_epoch  # Crosses into the next epoch.
  for got, expected in zip(batches(start=97, shard=HostShard(0, 1)), first[97:]):  # Resume at any step.
    chex.assert_trees_all_equal(got, expected)
  hosts = [batches(shard=HostShard(index, 2)) for index in range(2)]
  host_shapes = [set(), set()]
  for expected, *parts in zip(first, *hosts):  # Two hosts hold the halves of every global batch.
    chex.assert_trees_all_equal(jax.tree.map(lambda *x: np.concatenate(x), *parts), expected)
    for seen, part in zip(host_shapes, parts):
      seen.add(shape_of(part))
  # The shapes named ahead (to compile before training) are those the batches take, on every host.
  named = lambda shard: [shape_of(s) for s in dataset.bucketed_train_batch_shapes(cap, **plan, shard=shard)]
  assert len(named(HostShard(0, 1))) == 3 and set(named(HostShard(0, 1))) == {shape_of(batch) for batch in first}
  for index, seen in enumerate(host_shapes):
    assert len(named(HostShard(index, 2))) == 3 and set(named(HostShard(index, 2))) == seen
  with pytest.raises(ValueError, match=r'training.max_tokens=100 holds fewer than 4 examples of the length bucket 32'):
    next(batches(max_tokens=100))


def test_the_train_step_compiles_before_training_once_per_batch_shape(toy_corpus, tmp_path, caplog):
  """Compiled ahead for every bucket, the step compiles nothing more, fed batches of each bucket and its own
  output state (placed otherwise, the state made it compile again)."""
  config = toy_config(toy_corpus)
  config.data.length_buckets = (4, 8, 16)
  task = train.create_task(config, str(tmp_path))
  widths = {shapes['inputs'].shape[1] for shapes in task.train_batch_shapes}
  assert len(widths) >= 2
  p_train_step, _ = pmapped_steps(task)
  state = replicate(create_state(task, jax.random.PRNGKey(0)))
  rng, no_stop = replicate(jax.random.PRNGKey(1)), stop_requests(False)
  batches = device_batches(task.train_batches(0), size=2)
  first_batch = next(batches)
  sums = zero_sums(task, state, first_batch, rng, no_stop)
  compile_train_steps(p_train_step, state, sums, rng, no_stop, task.train_batch_shapes)
  steps_by_width = collections.Counter()
  every_width_twice = lambda: set(steps_by_width) == widths and min(steps_by_width.values()) >= 2
  with jax.log_compiles(True), caplog.at_level('WARNING'):
    for batch in itertools.islice(itertools.chain([first_batch], batches), 200):
      state, sums = p_train_step(state, sums, batch, rng, no_stop)
      steps_by_width[batch['inputs'].shape[-1]] += 1
      if every_width_twice():
        break
  assert every_width_twice()
  assert not [record.getMessage() for record in caplog.records if 'Finished XLA compilation' in record.getMessage()]


def test_length_sorted_evaluation_batches_hold_every_example_once_cut_only_where_it_is_padding():
  rng = np.random.default_rng(1)
  lengths = rng.integers(1, 30, 101).astype(np.int32)
  ids = np.where(np.arange(32)[None] < lengths[:, None], rng.integers(4, 50, (101, 32)), 0).astype(np.int32)
  dataset = ArrayDataset({'inputs': ids, 'lengths': lengths, 'row': np.arange(101)})
  plain = list(dataset.eval_batches(16, shard=HostShard(0, 1)))
  cut = list(dataset.eval_batches(16, shard=HostShard(0, 1), lengths_key='lengths', sequence_keys=('inputs',)))
  assert len(cut) == len(plain) == 7
  rows = np.concatenate([batch['row'][batch['weight'] > 0] for batch in cut])
  assert sorted(rows.tolist()) == list(range(101))  # Every example once, the padding rows weigh 0.
  assert (np.diff(lengths[rows]) >= 0).all()  # Shortest first.
  for batch in cut:
    real = batch['weight'] > 0
    width = batch['inputs'].shape[1]
    assert width % 8 == 0 and width - 8 < lengths[batch['row'][real]].max() <= width
    np.testing.assert_array_equal(batch['inputs'][real], ids[batch['row'][real], :width])
    assert not ids[batch['row'][real], width:].any()  # What was cut was padding.
  halves = [list(dataset.eval_batches(16, shard=HostShard(index, 2), lengths_key='lengths', sequence_keys=('inputs',)))
            for index in range(2)]
  for whole, *parts in zip(cut, *halves):  # Hosts share each batch's width and hold its halves.
    chex.assert_trees_all_equal(jax.tree.map(lambda *x: np.concatenate(x), *parts), whole)


# Decoding.

@pytest.mark.slow
@pytest.mark.parametrize('pos_encoding,norm_position,activation',
                         [(name, 'pre', 'gelu') for name in encodings.REGISTRY]
                         + [('sinusoidal', 'post', 'relu'), ('rope', 'post', 'relu')])
def test_cached_decoding_equals_full_forward(pos_encoding, norm_position, activation):
  model = small_model(pos_encoding, norm_position=norm_position, activation=activation)
  sources, targets = toy_batch()
  params = random_params(model, sources, targets)
  full = model.apply({'params': params}, sources, targets, train=False)
  stepper = model.clone(decode=True)
  cache = stepper.init(jax.random.PRNGKey(0), sources, jnp.ones((3, 12), jnp.int32), train=False)['cache']
  cache = jax.tree.map(jnp.zeros_like, cache)
  encoded = model.apply({'params': params}, sources, train=False, method=Seq2SeqTransformer.encode)
  decoder_inputs = shift_right(targets, BOS_ID)
  decode_step = jax.jit(functools.partial(stepper.apply, train=False, method=Seq2SeqTransformer.decode_logits,
                                          mutable=['cache']))
  stepwise = []
  for t in range(targets.shape[1]):
    logits, updated = decode_step({'params': params, 'cache': cache}, decoder_inputs[:, t:t + 1], encoded,
                                  sources != PAD_ID)
    cache = updated['cache']
    stepwise.append(logits[:, 0])
  # Same float32 arithmetic in another order; logits are O(1).
  np.testing.assert_allclose(jnp.stack(stepwise, axis=1), full, atol=2e-5)


def test_embedding_scalings_are_one_function_of_tables_a_factor_sqrt_d_apart():
  model = small_model('sinusoidal', norm_position='post')
  sources, targets = toy_batch()
  params = random_params(model, sources, targets)
  scaled = model.clone(embedding_scaling='sqrt_dim')
  table = params['source_embed']['embedding']
  scaled_params = params | {'source_embed': {'embedding': table / np.sqrt(table.shape[1])}}
  np.testing.assert_allclose(scaled.apply({'params': scaled_params}, sources, targets, train=False),
                             model.apply({'params': params}, sources, targets, train=False), rtol=1e-5, atol=1e-5)
  initial = scaled.init(jax.random.PRNGKey(0), sources, targets, train=False)['params']['source_embed']['embedding']
  # N(0, 1/d) entries: the std of 768 draws is within 4 standard errors (1 / sqrt(2 * 768) each) of 1/sqrt(d).
  assert abs(float(initial.std()) * np.sqrt(table.shape[1]) - 1) < 4 / np.sqrt(2 * table.size)


@pytest.mark.parametrize('norm_position', ['pre', 'post'])
def test_decoder_is_causal(norm_position):
  model = small_model('rope', norm_position=norm_position)
  sources, targets = toy_batch()
  params = random_params(model, sources, targets)
  changed = targets.at[:, 6:].set(5)
  before = model.apply({'params': params}, sources, targets, train=False)
  after = model.apply({'params': params}, sources, changed, train=False)
  np.testing.assert_array_equal(before[:, :7], after[:, :7])  # Logits at t see targets before t only.
  assert not np.allclose(before[:, 7:], after[:, 7:])


def test_a_translator_with_another_search_keeps_the_rest_and_rejects_impossible_ones():
  translator = Translator(small_model('sinusoidal'), None, beam_size=4, length_penalty=0.6, max_source_length=7,
                          max_output_length=12, batch_size=4)
  greedy = translator.with_search(beam_size=1)
  assert (greedy.beam_size, greedy.length_penalty, greedy.max_output_length) == (1, 0.6, 12)
  assert translator.with_search(length_penalty=1.0).beam_size == 4
  with pytest.raises(ValueError, match=r'beam_size=0 must be >= 1'):
    translator.with_search(beam_size=0)
  with pytest.raises(ValueError, match=r'length_penalty=-1 must be >= 0'):
    translator.with_search(length_penalty=-1)


@pytest.mark.slow
def test_beam_size_one_is_greedy():
  model = small_model('sinusoidal')
  sources, targets = toy_batch(rows=4)
  params = random_params(model, sources, targets)
  translator = Translator(model, None, beam_size=1, length_penalty=0.0, max_source_length=7, max_output_length=12,
                          batch_size=4)
  search = dict(batch_size=4, max_length=12, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID)

  @jax.jit
  def both(params, sources):
    step, cache = translator.decoding_state(params, sources, beams=1)
    untrained_step = step

    def step(tokens, cache):  # An untrained model rarely ends; make EOS win after some tokens.
      logits, cache = untrained_step(tokens, cache)
      ends_next = (tokens[:, 0] % 4 == 0) & (tokens[:, 0] != PAD_ID)
      return logits.at[:, EOS_ID].set(jnp.where(ends_next, logits.max(-1) + 1.0, logits[:, EOS_ID])), cache

    return (decode.greedy_search(step, cache, **search),
            [decode.beam_search(step, cache, beam_size=1, alpha=alpha, **search) for alpha in (0.0, 0.6)])

  greedy, beams = both(params, sources)
  assert 0 < (greedy == EOS_ID).any(axis=1).sum() < 4  # Rows that end and rows that run to max_length.
  for beam in beams:
    np.testing.assert_array_equal(beam, greedy)


def test_wide_beam_finds_the_best_normalised_sequence():
  """Oracle: with a beam as wide as all live prefixes, beam search is exhaustive search, scored by GNMT's
  length normalisation (Wu et al. 2016: log P / ((5 + length) / 6) ** alpha), which here changes the winner."""
  vocab, max_length = 5, 4
  logits = 3 * jax.random.normal(jax.random.PRNGKey(42), (vocab, vocab))
  # Log-probabilities as the search normalises them: PAD and BOS never emitted.
  transitions = jax.nn.log_softmax(logits.at[:, PAD_ID].set(-1e4).at[:, BOS_ID].set(-1e4))
  step = lambda tokens, cache: (transitions[tokens[:, 0]], cache)
  winners = set()
  for alpha in (0.0, 0.6, 2.0):
    found = decode.beam_search(step, jnp.zeros(()), batch_size=1, beam_size=vocab ** max_length,
                               max_length=max_length, alpha=alpha, bos_id=BOS_ID, eos_id=EOS_ID)[0]
    best, best_score = None, -np.inf
    for length in range(1, max_length + 1):
      for body in itertools.product([t for t in range(vocab) if t not in (PAD_ID, BOS_ID, EOS_ID)],
                                    repeat=length - 1):
        sequence = list(body) + [EOS_ID]
        previous = [BOS_ID] + sequence[:-1]
        score = float(sum(transitions[p, t] for p, t in zip(previous, sequence))) / ((5 + length) / 6) ** alpha
        if score > best_score:
          best, best_score = sequence, score
    assert list(np.asarray(found[:len(best)])) == best and (np.asarray(found[len(best):]) == PAD_ID).all()
    winners.add(tuple(best))
  assert len(winners) > 1  # The normalisation matters here, so a wrong one would pick another sequence.


# Training.

@pytest.fixture(scope='module')
def trained_toy(toy_corpus, tmp_path_factory):
  """A workdir trained on the toy corpus, and its results."""
  workdir = tmp_path_factory.mktemp('trained_toy')
  config = toy_config(toy_corpus, num_train_steps=400, log_every_steps=100)
  config.evaluation.update(every_steps=200, average_last=2)
  return workdir, run(config, workdir)


@pytest.mark.slow
def test_tiny_model_learns_toy_translation_to_high_bleu(toy_corpus, trained_toy):
  workdir, results = trained_toy
  test = results['test']
  # Held-out sentences of a word-for-word lexicon: a model that learned it is near perfect;
  # copying the source scores ~0 (no word is shared).
  assert test['bleu'] > 80, test
  assert results['baselines']['test_copy_source_bleu'] < 5
  assert test['bleu_signature'].startswith('nrefs:1|case:mixed|eff:no|tok:13a')
  assert test['tokenized_bleu'] > 80 and test['tokenized_bleu_signature'].startswith('moses:de|')
  with open(workdir / 'translations' / 'test.de', encoding='utf-8') as f:
    hypotheses = f.read().splitlines()
  references = input_pipeline.read_split(toy_corpus, 'test', 'en', 'de').targets
  assert len(hypotheses) == len(references) == 64
  assert np.mean([h == r for h, r in zip(hypotheses, references)]) > 0.7
  with open(workdir / 'results.json') as f:
    assert json.load(f)['test_sets']['test']['bleu'] == test['bleu']
  assert sorted(os.listdir(workdir / 'tokenizer')) == ['joint.model']
  # Each test sentence's BLEU statistics are written too; their sums give the scores, and sentence by
  # sentence they are those of the written translations.
  config = read_config(str(workdir), CONFIG_HISTORY)
  for name, protocol in bleu.protocols(read_data(config.data)).items():
    recorded = bleu.read_statistics(str(workdir), 'best', 'test', name, protocol)
    assert protocol.score_of_sums(recorded.statistics.sum(0)) == pytest.approx(test[name], abs=1e-9)
    np.testing.assert_array_equal(recorded.statistics, protocol.sentence_statistics(hypotheses, references))


@pytest.mark.slow
def test_translate_entry_point_matches_the_written_translations(toy_corpus, trained_toy):
  workdir, _ = trained_toy
  sources = input_pipeline.read_split(toy_corpus, 'test', 'en', 'de').sources[:8]
  with open(workdir / 'translations' / 'test.de', encoding='utf-8') as f:
    written = f.read().splitlines()[:8]
  assert translate.translate_sentences(str(workdir), sources) == written
  with open(workdir / 'translations' / 'averaged' / 'test.de', encoding='utf-8') as f:
    averaged = f.read().splitlines()[:8]
  assert translate.translate_sentences(str(workdir), sources, checkpoint='averaged') == averaged
  assert translate.translate_sentences(str(workdir), ['red dog'], beam_size=1) == ['rot Hund']
  assert translate.translate_sentences(str(workdir), []) == []  # Empty input: empty output, as a filter gives.


@pytest.mark.slow
def test_decoding_grid_scores_the_trained_setting_as_training_did(trained_toy, tmp_path):
  from lra_posenc.translation import decoding_grid
  workdir, results = trained_toy
  beam, penalty = results['config']['decoding']['beam_size'], results['config']['decoding']['length_penalty']
  output = tmp_path / 'grid.json'
  decoding_grid.main([f'--workdir={workdir}', '--split=test', f'--beam_sizes=1,{beam}',
                      f'--length_penalties={penalty},2.0', f'--output={output}'])
  with open(output) as f:
    grid = json.load(f)
  rows = {(row['beam_size'], row['length_penalty']): row for row in grid['rows']}
  assert list(rows) == [(1, None), (beam, penalty), (beam, 2.0)]  # Greedy search once: it has no penalty.
  # The setting training used, decoded anew from the best checkpoint, scores what training reported.
  bleu_keys = ('bleu', 'bleu_signature', 'tokenized_bleu', 'tokenized_bleu_signature')
  assert {k: rows[beam, penalty][k] for k in bleu_keys} == {k: results['test'][k] for k in bleu_keys}
  assert grid['steps'] == [results['best_step']] and grid['sentences'] == 64
  assert translate.checkpoint_params(str(workdir), 'averaged')[1] == results['averaged']['steps'] == [200, 400]
  with pytest.raises(FileNotFoundError, match='average_last'):  # A workdir that kept no evaluated parameters.
    translate.checkpoint_params(str(tmp_path), 'averaged')


@pytest.mark.slow
def test_bleu_by_source_length_partitions_the_test_set(trained_toy):
  workdir, results = trained_toy
  whole = translation_length_scores.scores_by_length(str(workdir), [1, 1000])
  assert list(whole) == ['1-999', '1000+'][:len(whole)]
  assert whole['1-999'] == {'score': pytest.approx(results['test']['bleu']), 'examples': 64}
  buckets = translation_length_scores.scores_by_length(str(workdir), [1, 4, 6])
  assert sum(b['examples'] for b in buckets.values()) == 64 and len(buckets) >= 2


def test_translate_names_a_workdir_of_another_task(tmp_path):
  with open(tmp_path / 'config.json', 'w') as f:
    json.dump(lra.get_config('cpu').to_dict(), f)
  with pytest.raises(ValueError, match=f"{tmp_path} is not a translation workdir: its config.json has task "
                                       "'listops'"):
    translate.translate_sentences(str(tmp_path), ['A dog.'])


def test_sources_and_targets_must_share_their_batch_axis():
  model = small_model('sinusoidal')
  sources, targets = toy_batch(rows=3)
  with pytest.raises(AssertionError, match='assert_equal_shape_prefix'):
    model.init(jax.random.PRNGKey(0), sources, targets[:2], train=False)


def token_batch(rows: int, target_length: int, seed: int):
  """Sources and targets of `target_length` ids with a random number of trailing pads per row."""
  rng = np.random.default_rng(seed)
  sources = rng.integers(4, 24, (rows, 6)).astype(np.int32)
  targets = rng.integers(4, 24, (rows, target_length)).astype(np.int32)
  for row, length in enumerate(rng.integers(1, target_length + 1, rows)):
    targets[row, length:] = PAD_ID
  return {'inputs': sources, 'targets': targets, 'weight': np.ones(rows, np.float32)}


@pytest.mark.slow
@pytest.mark.parametrize('share_embeddings', [True, False])  # Tied logits; an output table with a bias.
def test_training_gradient_is_that_of_the_mean_loss_per_target_token(share_embeddings):
  model, label_smoothing = small_model('sinusoidal', max_len=40, share_embeddings=share_embeddings), 0.1
  batch = token_batch(4, 40, seed=1)
  params = random_params(model, batch['inputs'], batch['targets'])
  # Chunks of 7 tokens: the 160 target tokens leave a padded last chunk.
  loss_settings = LossSettings(label_smoothing=label_smoothing, chunk_tokens=7)
  settings = read_settings(multi30k.get_config('sweep'), reads_text=False).trainer
  task = Task(metrics=functools.partial(train.translation_metrics, model, loss_settings), init_params=None,
              train_batches=None, eval_batches=None, artifacts={}, baselines={}, settings=settings)
  # SGD's update is -learning_rate x the gradient: at 1e4 it stands far above the parameters' rounding.
  learning_rate = 1e4
  state = train_state.TrainState.create(apply_fn=None, params=params, tx=optax.sgd(learning_rate))
  step = jax.pmap(functools.partial(train_step, task=task), axis_name=AXIS,
                  devices=jax.local_devices()[:1])
  expand = lambda tree: jax.tree.map(lambda x: np.asarray(x)[None], tree)
  updated, _, _ = step(expand(state), expand(batch), expand(jax.random.PRNGKey(0)), np.zeros(1, bool))
  gradient = jax.tree.map(lambda new, old: (old - new[0]) / learning_rate, updated.params, params)

  def per_token_mean(p):  # optax's cross-entropy against the smoothed target distribution.
    logits = model.apply({'params': p}, batch['inputs'], batch['targets'], train=False)
    one_hot = jax.nn.one_hot(batch['targets'], logits.shape[-1])
    soft = one_hot * (1 - label_smoothing) + (1 - one_hot) * label_smoothing / (logits.shape[-1] - 1)
    real = batch['targets'] != PAD_ID
    return (optax.softmax_cross_entropy(logits, soft) * real).sum() / real.sum()

  expected = jax.jit(jax.grad(per_token_mean))(params)
  # Float32 sums over tokens and vocabulary in another order: 1e-5 relative. The per-sentence
  # objective this replaced is off by the tokens per sentence (23, 16, 21 and 1 here).
  error = optax.tree.norm(jax.tree.map(jnp.subtract, gradient, expected)) / optax.tree.norm(expected)
  assert error < 1e-5, error


@pytest.mark.slow
def test_stop_and_resume_gives_identical_parameters(toy_corpus, tmp_path):
  # Token-budget batches: 24 sentences of bucket 8, 12 of bucket 16.
  config = toy_config(toy_corpus, num_train_steps=12, batch_size=32, max_tokens=192)
  config.model.update(dropout_rate=0.1, attention_dropout_rate=0.1)  # Resume must restore the dropout keys too.
  config.checkpoint.every_steps = 12
  config.decoding.beam_size = 1
  straight = run(config, tmp_path / 'straight')
  assert run(config, tmp_path / 'resumed', should_stop=lambda step: step == 5) == {
      'status': 'stopped', 'step': 5, 'training_ended': {'reason': 'stop_request', 'step': 5}}
  resumed = run(config, tmp_path / 'resumed')
  assert resumed['steps_this_run'] == 7
  chex.assert_trees_all_equal(final_params(tmp_path / 'straight', 12),
               final_params(tmp_path / 'resumed', 12))
  assert resumed['test'] == straight['test']


@pytest.mark.parametrize('key, value, message', [
    ('model.pos_encoding', 'sinus', r"model.pos_encoding='sinus' is not a known encoding; valid choices: \['none'"),
    ('data.tokenizer.model_type', 'word', r"data.tokenizer.model_type='word' is not one of \['unigram', 'bpe'\]"),
    ('data.length_buckets', (8, 12), r'data.length_buckets=\(8, 12\) must be increasing .* data.max_length=16'),
    ('data.tokenizer.joint', False, r'model.share_embeddings=True needs data.tokenizer.joint=True'),
    ('loss.label_smoothing', 1.0, r'loss.label_smoothing=1.0 must be >= 0 and < 1'),
    ('loss.chunk_tokens', -1, r'loss.chunk_tokens=-1 must be >= 0'),
    ('decoding.length_penalty', -0.5, r'decoding.length_penalty=-0.5 must be >= 0'),
    ('data.tokenizer.vocab_size', 4, r'data.tokenizer.vocab_size=4 must be > 4 \(ids 0-3 are padding'),
    ('data.tokenizer.character_coverage', 1.5, r'data.tokenizer.character_coverage=1.5 must be > 0 and <= 1'),
    ('decoding.beam_size', 0, r'decoding.beam_size=0 must be > 0'),
    ('model.num_heads', 3, r'model.qkv_dim=32 is not divisible by model.num_heads=3'),
    ('data.data_dir', '', r'data.data_dir is empty'),
    ('data.test_splits', ('test', 'test'), r"data.test_splits=\('test', 'test'\) names a split twice"),
    ('data.test_splits', ('test', 'validation'), r"names 'validation', the name results give "
                                                 r"data.validation_split='val'"),
])
def test_bad_config_fails_before_reading_data(toy_corpus, key, value, message):
  config = toy_config(toy_corpus)
  section, _, name = key.rpartition('.')
  config_section = config
  for part in section.split('.'):
    config_section = config_section[part]
  config_section[name] = value
  with pytest.raises(ValueError, match=message):
    train.read_settings(config)


def test_a_decoding_batch_the_local_devices_cannot_share_fails_before_reading_data(toy_corpus, monkeypatch):
  monkeypatch.setattr(jax, 'local_device_count', lambda: 4)  # As with four local devices.
  config = toy_config(toy_corpus)
  config.decoding.batch_size = 6
  with pytest.raises(ValueError, match=r'decoding.batch_size=6 is not divisible by the 4 local devices'):
    train.read_settings(config)


def test_a_config_json_from_before_the_last_additions_reads_with_todays_keys(toy_corpus):
  config = toy_config(toy_corpus).to_dict()
  old = copy.deepcopy(config)
  del old['task'], old['loss']['chunk_tokens'], old['data']['tokenizer']['lowercase']
  assert upgrade_old_config(old, CONFIG_HISTORY) == config
  with ml_collections.ConfigDict(old).unlocked() as stale:
    stale.data.max_eval_length = 16
    with pytest.raises(ValueError, match=r'data.max_eval_length was renamed; use data.max_eval_source_length'):
      train.read_settings(stale)


def test_unknown_config_section_is_named(toy_corpus):
  config = toy_config(toy_corpus)
  config.decoding.beam_width = 4
  with pytest.raises(ValueError, match=r"decoding.beam_width is not a config key the code reads; valid keys of "
                                       r"decoding: \['beam_size', 'length_penalty', 'max_output_length', 'batch_size'\]"):
    train.read_settings(config)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(MULTI30K_DIR), reason=f'Multi30k not present at {MULTI30K_DIR}')
def test_multi30k_trains_and_scores_every_test_set(tmp_path):
  config = multi30k.get_config('cpu')
  config.data.data_dir = MULTI30K_DIR
  config.data.tokenizer.vocab_size = 2000
  config.data.max_eval_source_length = 48  # The longest test pair has 47 ids with EOS.
  config.data.length_buckets = ()  # One train-step shape to compile: buckets are the toy tests' subject.
  config.decoding.max_output_length = 16  # What is checked is that every sentence is translated and scored.
  config.model.update(emb_dim=32, qkv_dim=32, mlp_dim=64, num_heads=4, num_layers=1)
  config.optimizer.update(learning_rate=3e-3, warmup_steps=10)
  config.training.update(num_train_steps=30, log_every_steps=10)
  config.evaluation.every_steps = 30
  config.decoding.beam_size = 1
  results = run(config, tmp_path)
  assert list(results['test_sets']) == list(multi30k.MULTI30K_TEST_SPLITS)
  for split, count in (('test_2016_flickr', 1000), ('test_2017_flickr', 1000), ('test_2017_mscoco', 461)):
    with open(tmp_path / 'translations' / f'{split}.de', encoding='utf-8') as f:
      assert len(f.read().splitlines()) == count
    assert 0 <= results['test_sets'][split]['bleu'] <= 100
  # 30 steps of a tiny model are far from translating; the copy baseline says what a floor is.
  assert 0 < results['baselines']['test_2016_flickr_copy_source_bleu'] < 10
  assert results['validation']['accuracy'] > 0.05


@pytest.mark.skipif(not os.path.isdir(MULTI30K_DIR), reason=f'Multi30k not present at {MULTI30K_DIR}')
def test_download_script_fetches_and_checks_line_counts(tmp_path):
  import download_multi30k
  source = 'file://' + os.path.abspath(MULTI30K_DIR)
  fetched = download_multi30k.download(str(tmp_path), base_url=source, languages=('en', 'de'))
  assert len(fetched) == 12 and download_multi30k.download(str(tmp_path), base_url=source, languages=('en',)) == []
  with gzip.open(tmp_path / 'val.de.gz', 'wt') as f:
    f.write('one line\n')
  with pytest.raises(ValueError, match=r'val\.de\.gz: 1 lines, but the Multi30k release has 1014'):
    download_multi30k.download(str(tmp_path), base_url=source, languages=('de',))


def test_the_iwslt2017_script_writes_aligned_splits_the_pipeline_reads_and_refuses_a_misaligned_archive(tmp_path):
  import prepare_iwslt2017
  def archive(path, dev_en_segments):
    files = {'train.tags.fr-en.fr': '<url>http://www.ted.com/a</url>\n<talkid>1</talkid>\n  Bonjour.  \nMerci.\n',
             'train.tags.fr-en.en': '<url>http://www.ted.com/a</url>\n<talkid>1</talkid>\nHello.\nThanks.\n'}
    for split in ['dev2010'] + [f'tst{year}' for year in prepare_iwslt2017.TEST_YEARS]:
      segments = {'fr': ['Un chat.', 'Deux &amp; trois'],
                  'en': ['A cat.', 'Two &amp; three'][:dev_en_segments if split == 'dev2010' else 2]}
      for lang, lines in segments.items():
        files[f'IWSLT17.TED.{split}.fr-en.{lang}.xml'] = '<mteval>\n<doc docid="1">\n<title>T</title>\n' + ''.join(
            f'<seg id="{n}"> {line} </seg>\n' for n, line in enumerate(lines, 1)) + '</doc>\n</mteval>\n'
    with tarfile.open(path, 'w:gz') as tar:
      for name, text in files.items():
        info = tarfile.TarInfo(f'fr-en/{name}')
        info.size = len(text.encode())
        tar.addfile(info, io.BytesIO(text.encode()))
    return str(path)

  counts = prepare_iwslt2017.write_splits(prepare_iwslt2017.read_splits(archive(tmp_path / 'a.tgz', 2), 'fr', 'en'),
                                          str(tmp_path / 'out'))
  assert counts == {'train': 2, 'dev2010': 2, **{f'tst{year}': 2 for year in prepare_iwslt2017.TEST_YEARS}}
  train_split = input_pipeline.read_split(str(tmp_path / 'out'), 'train', 'fr', 'en')
  dev = input_pipeline.read_split(str(tmp_path / 'out'), 'dev2010', 'fr', 'en')
  assert list(zip(train_split.sources, train_split.targets)) == [('Bonjour.', 'Hello.'), ('Merci.', 'Thanks.')]
  assert list(zip(dev.sources, dev.targets)) == [('Un chat.', 'A cat.'), ('Deux & trois', 'Two & three')]
  with pytest.raises(ValueError, match=r'b\.tgz: dev2010 has 2 fr lines and 1 en lines'):
    prepare_iwslt2017.read_splits(archive(tmp_path / 'b.tgz', 1), 'fr', 'en')
  with pytest.raises(ValueError, match=r'no train\.tags\.de-en\.de; not the WIT3 archive of de-en'):
    prepare_iwslt2017.read_splits(str(tmp_path / 'a.tgz'), 'de', 'en')


def test_a_download_with_a_wrong_line_count_is_not_kept(tmp_path):
  import download_multi30k
  source, output = tmp_path / 'source', tmp_path / 'output'
  os.makedirs(source)
  for split, size in download_multi30k.SPLIT_SIZES.items():
    with gzip.open(source / f'{split}.de.gz', 'wt') as f:
      f.write('ein Satz\n' * (size - (split == 'val')))  # val one line short.
  with pytest.raises(ValueError, match=r'/val\.de\.gz: 1013 lines, but the Multi30k release has 1014'):
    download_multi30k.download(str(output), base_url=f'file://{source}', languages=('de',))
  assert sorted(os.listdir(output)) == ['train.de.gz']  # Fetched before val, and right.


def test_tfds_translation_dataset_by_name(tmp_path):
  tfds = pytest.importorskip('tensorflow_datasets')
  with tfds.testing.mock_data(num_examples=6):
    text = input_pipeline.read_tfds_split('ted_hrlr_translate/pt_to_en', 'train', 'pt', 'en', None)
    assert len(text.sources) == len(text.targets) == 6 and all(isinstance(s, str) for s in text.sources)
    assert text.source_path == 'tfds:ted_hrlr_translate/pt_to_en[train]'
    with pytest.raises(DataError, match=r"tfds:ted_hrlr_translate/pt_to_en\[train\]:0: no 'de' field"):
      input_pipeline.read_tfds_split('ted_hrlr_translate/pt_to_en', 'train', 'pt', 'de', None)


@pytest.mark.parametrize('variant', multi30k.VARIANTS)
def test_every_multi30k_config_variant_is_valid(variant):
  config = multi30k.get_config(variant)
  config.data.data_dir = 'data/multi30k'  # The one key a user must set.
  train.read_settings(config)
  transformer_config(config.model, max_len=config.data.max_eval_source_length)


def corpus_bleu_oracle(hypotheses: list[list[str]], references: list[list[str]]) -> float:
  """Corpus BLEU-4 on token lists (Papineni et al. 2002), written out: clipped n-gram precisions, brevity penalty."""
  matches, totals = [0] * 4, [0] * 4
  for hypothesis, reference in zip(hypotheses, references):
    for n in range(1, 5):
      grams = lambda tokens: collections.Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
      reference_grams = grams(reference)
      matches[n - 1] += sum(min(count, reference_grams[gram]) for gram, count in grams(hypothesis).items())
      totals[n - 1] += max(len(hypothesis) - n + 1, 0)
  precision = math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)
  hypothesis_length, reference_length = sum(map(len, hypotheses)), sum(map(len, references))
  brevity = 1.0 if hypothesis_length > reference_length else math.exp(1 - reference_length / hypothesis_length)
  return 100 * brevity * precision


def test_tokenized_bleu_is_corpus_bleu_on_lowercased_moses_tokens():
  hypotheses = ['Ein Hund läuft über die Wiese.', 'Zwei Männer spielen Fußball im Park!',
                'Eine Frau, die ein Buch liest.']
  references = ['ein Hund rennt über die grüne Wiese.', 'Zwei Männer spielen im Park Fußball!',
                'Eine Frau, die ein dickes Buch liest.']
  tokens = [['ein', 'hund', 'läuft', 'über', 'die', 'wiese', '.'],
            ['zwei', 'männer', 'spielen', 'fußball', 'im', 'park', '!'],
            ['eine', 'frau', ',', 'die', 'ein', 'buch', 'liest', '.']]
  reference_tokens = [['ein', 'hund', 'rennt', 'über', 'die', 'grüne', 'wiese', '.'],
                      ['zwei', 'männer', 'spielen', 'im', 'park', 'fußball', '!'],
                      ['eine', 'frau', ',', 'die', 'ein', 'dickes', 'buch', 'liest', '.']]
  scores = bleu.protocol_scores('tokenized_bleu', bleu.tokenized_bleu_protocol('de'), hypotheses, references)
  assert scores['tokenized_bleu'] == pytest.approx(corpus_bleu_oracle(tokens, reference_tokens), rel=1e-9)
  assert scores['tokenized_bleu_signature'].startswith('moses:de|nrefs:1|case:lc|eff:no|tok:none|smooth:none')
  # Case and the space before punctuation count in sacreBLEU's cased headline, not here.
  english = bleu.tokenized_bleu_protocol('en')
  assert bleu.protocol_scores('tokenized_bleu', english, ['A dog runs.'], ['a dog runs .'])['tokenized_bleu'] == (
      pytest.approx(100))
  assert bleu.sacrebleu_scores(['A dog runs.'], ['a dog runs .'])['bleu'] < 100
  # A lowercasing tokenizer's output is scored lowercased, and its signature says so.
  lowercased = bleu.sacrebleu_scores(['a dog runs.'], ['A dog runs.'], lowercase=True)
  assert lowercased['bleu'] == pytest.approx(100) and 'case:lc' in lowercased['bleu_signature']
  assert bleu.sacrebleu_scores(['a dog runs.'], ['A dog runs.'])['bleu'] < 100


@pytest.mark.slow
def test_bleu_selection_picks_the_checkpoint_with_the_best_greedy_validation_bleu(toy_corpus, tmp_path):
  config = toy_config(toy_corpus, num_train_steps=90, log_every_steps=30)
  config.evaluation.update(every_steps=30, selection_metric='bleu')
  results = run(config, tmp_path)
  validations = read_history(str(tmp_path), 'validation')
  assert [r['step'] for r in validations] == [30, 60, 90] and all('bleu' in r for r in validations)
  best = max(validations, key=lambda r: r['bleu'])  # max() keeps the first of equal scores, as the trainer does.
  assert results['best_step'] == best['step'] and results['validation']['bleu'] == best['bleu']
  # The same score another way: the best checkpoint's greedy translations of the validation split, scored anew.
  saved, params, _ = restore_best(str(tmp_path), CONFIG_HISTORY)
  tokenizers = input_pipeline.workdir_tokenizers(str(tmp_path), joint=saved.data.tokenizer.joint,
                                                 lowercase=saved.data.tokenizer.lowercase)
  validation = input_pipeline.read_split(toy_corpus, 'val', 'en', 'de')
  greedy = create_translator(saved, tokenizers).with_search(beam_size=1)
  assert bleu.sacrebleu_scores(greedy.translate(params, validation.sources), validation.targets)['bleu'] == (
      pytest.approx(best['bleu']))


def test_selection_metric_is_checked_by_each_task(toy_corpus):
  config = toy_config(toy_corpus)
  config.evaluation.selection_metric = 'loss'
  with pytest.raises(ValueError, match=r"evaluation.selection_metric='loss' is not one of \['accuracy', 'bleu'\]"):
    train.read_settings(config)


@pytest.mark.parametrize('pos_encoding', ['sinusoidal', 'rope', 't5'])
def test_the_accelerator_train_step_has_no_conditional_and_no_loop(toy_corpus, tmp_path, pos_encoding):
  """On a GPU a conditional's predicate and a loop's trip test are copied to the host, which waits for them:
  the train step lowered for CUDA with the accelerators' loss chunk (and dropout) holds neither. With the
  CPU's chunks the loss is a loop, so the check itself can fail. Lowered as jit of vmap, which binds the
  device axis as pmap does: pmap lowers only for the devices at hand."""
  config = toy_config(toy_corpus)
  config.model.update(pos_encoding=pos_encoding, dropout_rate=0.1, attention_dropout_rate=0.1)
  config.data.length_buckets = (16,)  # 16 rows of 16 tokens: two CPU chunks.
  hlo = {}
  for backend in ('gpu', 'cpu'):
    config.loss.chunk_tokens = loss.automatic_chunk_tokens(backend)
    task = train.create_task(config, str(tmp_path / backend))
    state = replicate(create_state(task, jax.random.PRNGKey(0)))
    batch = next(device_batches(task.train_batches(0), size=1))
    rng, no_stop = replicate(jax.random.PRNGKey(1)), stop_requests(False)
    sums = zero_sums(task, state, batch, rng, no_stop)
    step = jax.jit(jax.vmap(functools.partial(accumulating_train_step, task=task), axis_name=AXIS))
    hlo[backend] = step.trace(state, sums, batch, rng, no_stop).lower(lowering_platforms=('cuda',)).as_text()
  control_flow = lambda text: sorted(set(re.findall(r'stablehlo\.(while|case|if)\b', text)))
  assert control_flow(hlo['gpu']) == []
  assert control_flow(hlo['cpu']) == ['while']
