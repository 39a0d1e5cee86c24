"""Passkey retrieval: needles and queries in the windows, their scoring by depth and distance, the settings."""
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.lm import shakespeare_char
from lra_posenc.lm import passkey, passkey_grid, sample, scoring, settings, train
from lra_posenc.lm.input_pipeline import TokenSplit
from lra_posenc.lm.passkey import Passkey, PasskeyScorer
from lra_posenc.training import distributed, trainer
from lra_posenc.training.batches import HostShard

KEY = Passkey(first_id=20, length=3)  # Text ids 1-19; the marker 20; symbols 21-30.


def text_ids(count: int) -> np.ndarray:
  return np.random.default_rng(0).integers(1, 20, count).astype(np.int32)


def test_a_needle_and_the_query_replace_text_and_the_key_is_the_last_targets():
  windows = text_ids(2 * 12).reshape(2, 12)
  planted = KEY.plant(windows, np.array([0, KEY.last_start(12)]), np.array([[1, 2, 3], [9, 9, 0]]))
  np.testing.assert_array_equal(planted[0, :4], [20, 22, 23, 24])
  np.testing.assert_array_equal(planted[0, -4:], [20, 22, 23, 24])
  np.testing.assert_array_equal(planted[1, 4:12], [20, 30, 30, 21, 20, 30, 30, 21])  # Needle just before the query.
  np.testing.assert_array_equal(planted[0, 4:8], windows[0, 4:8])  # Text between is kept.
  np.testing.assert_array_equal(planted[:, 1:][:, -KEY.length:], [[22, 23, 24], [30, 30, 21]])
  with pytest.raises(ValueError, match='outside'):
    KEY.plant(windows, np.array([0, KEY.last_start(12) + 1]), np.zeros((2, 3), int))


def test_a_stated_fraction_of_training_windows_carries_one_and_the_rest_are_the_plain_windows():
  split = TokenSplit('train', text_ids(5000), 0)
  edit = functools.partial(KEY.carry, fraction=0.25)
  plain = split.train_batches(64, 16, seed=3, shard=HostShard(0, 1))
  edited = split.train_batches(64, 16, seed=3, shard=HostShard(0, 1), edit=edit)
  carried, depths = 0, set()
  for _ in range(20):
    a, b = next(plain), next(edited)
    queried = b['inputs'][:, -KEY.length] == 20  # The query's marker, where the key's first target is read.
    markers = (b['inputs'] == 20).sum(1)
    np.testing.assert_array_equal(markers, 2 * queried)  # One needle with each query, none without.
    np.testing.assert_array_equal(a['inputs'][~queried], b['inputs'][~queried])
    np.testing.assert_array_equal(b['targets'][:, :-1], b['inputs'][:, 1:])
    windows = np.concatenate([b['inputs'], b['targets'][:, -1:]], axis=1)[queried]
    starts = np.argmax(windows == 20, axis=1)
    needles = windows[np.arange(len(windows))[:, None], starts[:, None] + np.arange(KEY.span)]
    np.testing.assert_array_equal(needles, windows[:, -KEY.span:])  # The query asks for the needle's key.
    depths.update(starts.tolist())
    carried += queried.sum()
  assert abs(carried / (20 * 64) - 0.25) < 0.04  # 1280 windows: 3 standard deviations of a binomial.
  assert len(depths) > 8  # Uniform over the 17 - 2 x 4 + 1 = 10 starts of a window of 17 tokens.
  # A pure function of (seed, index): resumed and split over hosts, the same windows.
  resumed = split.train_batches(64, 16, seed=3, start=19, shard=HostShard(0, 1), edit=edit)
  np.testing.assert_array_equal(next(resumed)['inputs'], b['inputs'])
  halves = [next(split.train_batches(64, 16, seed=3, start=19, shard=HostShard(host, 2), edit=edit))['inputs']
            for host in (0, 1)]
  np.testing.assert_array_equal(np.concatenate(halves), b['inputs'])


class LookbackOracle:
  """A stand-in model that reads a needle `reach` tokens back or fewer: at the query's key positions it writes the
  needle's symbols when the needle's marker is that close, else text; elsewhere nothing."""

  def __init__(self, key: Passkey, reach: int, vocab_size: int = 32):
    self.key, self.reach, self.vocab_size = key, reach, vocab_size

  def apply(self, variables, inputs, *, train, rngs):
    del variables, train, rngs
    length = inputs.shape[1]
    query = length - self.key.length  # The query's marker, in inputs.
    needle = jnp.argmax(inputs == self.key.first_id, axis=1)  # The marker's first occurrence.
    steps = jnp.arange(length) - query  # At the query's marker: 0.
    copied = jnp.take_along_axis(inputs, jnp.clip(needle[:, None] + 1 + steps, 0, length - 1), axis=1)
    reads = (steps >= 0) & ((query - needle) <= self.reach)[:, None]
    return jax.nn.one_hot(jnp.where(reads, copied, 1), self.vocab_size)


@pytest.mark.parametrize('reach', [5, 37, 38, 1000])  # At 64, one depth's needle is 38 tokens back.
def test_accuracy_by_depth_is_one_exactly_where_the_needle_is_within_reach(reach):
  split = TokenSplit('valid', text_ids(3000), 0)
  scorer = PasskeyScorer(LookbackOracle(KEY, reach), KEY, depths=6, trials=5)
  params = distributed.replicate({})
  for length in (16, 64):
    score = scorer.score_length(params, split, length, jax.device_count() * 4, 'test', block_size=16)
    # Read at drawn positions (a model trained on randomized ones), the same windows; the oracle ignores them.
    drawn = scorer.score_length(params, split, length, jax.device_count() * 4, 'test', block_size=16, drawn=True)
    assert drawn == score | {'positions': 'drawn'}
    distances = [cell['distance'] for cell in score['by_depth']]
    # Depths 0 ... 1 place the needle's marker from the window's start to just before the query.
    assert distances[0] == length - KEY.length and distances[-1] == KEY.span
    assert distances == sorted(distances, reverse=True)
    expected = [float(distance <= reach) for distance in distances]
    assert [cell['accuracy'] for cell in score['by_depth']] == expected
    assert score['windows'] == 30 and score['accuracy'] == pytest.approx(np.mean(expected))
    far = [e for e, distance in zip(expected, distances) if distance >= 16]
    assert (score['beyond_window'] is None if not far
            else score['beyond_window'] == {'accuracy': pytest.approx(np.mean(far)), 'windows': 5 * len(far)})
  # Every model reads the same windows and keys.
  again = PasskeyScorer(LookbackOracle(KEY, 0), KEY, depths=6, trials=5)
  first, second = (s.passkey.haystacks(split, 64, 6, 5) for s in (scorer, again))
  np.testing.assert_array_equal(first[0].arrays['inputs'], second[0].arrays['inputs'])
  with pytest.raises(ValueError, match='valid: 3000 tokens, but passkey windows of 4096 tokens and the next needs'):
    scorer.passkey.haystacks(split, 4096, 6, 5)


def test_a_model_that_does_not_retrieve_within_its_window_has_no_passkey_figures_but_is_counted():
  def scores(own, far):
    cell = lambda accuracy, beyond: {'accuracy': accuracy, 'windows': 8, 'by_depth': [],
                                     'beyond_window': beyond}
    return {'8': cell(own, None), '16': cell((own + far) / 2, {'accuracy': far, 'windows': 4}),
            '32': cell(far, {'accuracy': far, 'windows': 6})}
  learned = passkey.recorded_columns('validation', scores(0.75, 0.5), 8)
  assert learned == {'validation passkey at 8': 0.75, 'validation passkey at 16': 0.625,
                     'validation passkey at 32': 0.5, 'validation passkey beyond the window': 0.5,
                     'validation passkey learned': 1.0}
  mixed = scores(0.75, 0.0)
  mixed['16']['beyond_window']['accuracy'] = 1.0  # Pooled by windows: (4 x 1 + 6 x 0) / 10.
  assert passkey.recorded_columns('validation', mixed, 8)['validation passkey beyond the window'] == 0.4
  never = passkey.recorded_columns('validation', scores(passkey.LEARNED_ACCURACY - 0.01, 0.0), 8)
  assert never == {key: None for key in learned} | {'validation passkey learned': 0.0}


@pytest.mark.parametrize('key, value, error', [
    ('data.passkey_fraction', 1.5, r'data.passkey_fraction=1.5 must be >= 0 and <= 1'),
    ('data.passkey_fraction', -0.1, r'data.passkey_fraction=-0.1 must be >= 0'),
    ('data.passkey_length', 0, r'data.passkey_length=0 must be >= 1'),
    ('data.passkey_length', 32, r'data.passkey_length=32: a needle and a query .* \(66 tokens\) do not fit in a '
                                r'training window and its next token \(data.block_size=64 \+ 1\)'),
    ('scoring.passkey_depths', 0, r'scoring.passkey_depths=0 must be >= 1'),
    ('scoring.passkey_trials', 0, r'scoring.passkey_trials=0 must be >= 1'),
])
def test_bad_passkey_settings_are_refused_naming_the_key(key, value, error):
  config = shakespeare_char.get_config('cpu')
  config.data.update(text_file='input.txt', passkey_fraction=0.5)
  section, name = key.split('.')
  config[section][name] = value
  with pytest.raises(ValueError, match=error):
    settings.read_settings(config)


def test_old_configs_read_without_passkeys():
  config = shakespeare_char.get_config('cpu').to_dict()
  for section, key in (('data', 'passkey_fraction'), ('data', 'passkey_length'), ('scoring', 'passkey_depths'),
                       ('scoring', 'passkey_trials')):
    del config[section][key]
  settings.CONFIG_HISTORY[settings.TASK].upgrade(config)
  assert config['data']['passkey_fraction'] == 0.0
  assert shakespeare_char.get_config('cpu').to_dict() == config  # The other defaults: today's.


@pytest.mark.slow
def test_a_run_with_passkeys_scores_them_at_every_length(tmp_path):
  path = tmp_path / 'input.txt'
  path.write_text(''.join(chr(97 + (i * i) % 7) for i in range(3000)))
  config = shakespeare_char.get_config('cpu')
  config.data.update(text_file=str(path), block_size=16, passkey_fraction=0.5, passkey_length=2)
  config.model.update(emb_dim=16, qkv_dim=16, mlp_dim=32, num_heads=2, num_layers=1, pos_encoding='rope')
  config.training.update(batch_size=4, num_train_steps=10, log_every_steps=5)
  config.evaluation.update(batch_size=8, every_steps=10)
  config.checkpoint.update(every_steps=10)
  config.scoring.update(length_multiples=(1, 4), passkey_depths=3, passkey_trials=2, stretch_options=())
  workdir = str(tmp_path / 'run')
  task = train.create_task(config, workdir)
  results = trainer.train_and_evaluate(workdir, task)
  scores = results['test_sets']['validation'][scoring.PASSKEY]
  assert set(scores) == {'16', '64'}
  assert [cell['distance'] for cell in scores['64']['by_depth']] == [62, 32, 3]  # (64 - 2) - round(depth x 59).
  assert scores['16']['beyond_window'] is None and scores['64']['beyond_window']['windows'] == 4
  columns = scoring.recorded_columns(results)
  assert columns['validation passkey learned'] == float(scores['16']['accuracy'] >= passkey.LEARNED_ACCURACY)
  # The model's ids: the unknown id and the 4 letters of i^2 mod 7, then the marker and ten symbols.
  assert task.init_params(jax.random.PRNGKey(0))['embed']['embedding'].shape == (1 + 4 + 1 + 10, 16)
  # Text drawn from it is text (its letters, or U+FFFD for the unknown id): 11 of its 16 ids are a passkey's,
  # which sampling never writes.
  texts = sample.Sampler.from_workdir(workdir).sample('a', num_tokens=200, num_samples=4, temperature=2.0, top_k=0)
  assert all(set(text) <= set('abce\ufffd') for text in texts) and sum(map(len, texts)) == 4 * 201


def test_the_grid_averages_the_seeds_that_retrieve_and_names_those_that_do_not(tmp_path):
  def write(variant, seed, own, far):
    cell = lambda accuracy, distances: {'accuracy': accuracy, 'windows': 4, 'beyond_window': None, 'by_depth': [
        {'depth': depth, 'distance': distance, 'accuracy': accuracy} for depth, distance in zip((0, 1), distances)]}
    scores = {'8': cell(own, (6, 3)), '16': cell(far, (14, 3)), '32': {'not_measured': 'learned cannot extrapolate'}}
    run = tmp_path / 'runs' / variant / f'seed_{seed}'
    run.mkdir(parents=True)
    (run / 'results.json').write_text(json.dumps({'config': {'data': {'block_size': 8}},
                                                  'test_sets': {'validation': {scoring.PASSKEY: scores}}}))
  write('rope', 0, 1.0, 0.25)
  write('rope', 1, 0.75, 0.75)
  write('rope', 2, 0.25, 1.0)  # Never retrieves in its own window: left out.
  write('alibi', 0, 0.0, 0.0)
  variants = passkey_grid.grids(str(tmp_path / 'runs'), 'validation')
  assert variants['rope']['seeds'] == [0, 1, 2] and variants['rope']['learned'] == [0, 1]
  assert variants['rope']['lengths'] == {'8': {'distances': [6, 3], 'accuracy': [0.875, 0.875]},
                                         '16': {'distances': [14, 3], 'accuracy': [0.5, 0.5]}}
  assert variants['alibi']['learned'] == [] and variants['alibi']['lengths'] == {}
  passkey_grid.main([f'--runs={tmp_path / "runs"}', f'--output={tmp_path / "grid.png"}'])
  assert (tmp_path / 'grid.png').stat().st_size > 0
  assert json.loads((tmp_path / 'grid.json').read_text()) == variants
