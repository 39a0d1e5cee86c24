"""ListOps beyond LRA: nesting depth from the reader, label-preserving augmentation, the evaluate command."""
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from configs.listops import lra
from conftest import TESTS_DIR, run_listops, tiny_config
from lra_posenc.data import listops as generator
from lra_posenc.data.files import DataError
from lra_posenc.listops import augment, evaluate, input_pipeline, train
from lra_posenc.listops import settings as listops_settings
from lra_posenc.listops.input_pipeline import VOCAB

AUGMENT_ALL = dict(shuffle_arguments=1.0, contract_subtrees=0.5)


def write_rows(path, rows) -> str:
  with open(path, 'w') as f:
    f.write('Source\tTarget\n' + ''.join(f'{expression}\t{label}\n' for expression, label in rows))
  return str(path)


def nested(depth: int) -> str:
  expression = '7'
  for _ in range(depth):
    expression = f'[MAX 1 {expression} ]'
  return expression


def test_depth_is_the_most_lists_open_at_once_as_the_reader_sees_them(tmp_path):
  rows = [(nested(d), 7) for d in range(6)]
  rows.append(('[MAX [MIN 1 2 ] [SM 3 4 ] [MED 5 [MIN 6 7 ] 8 ] ]', 7))  # Siblings do not add; the deepest counts.
  rows.append(('( ( ( [MAX 2 ) 9 ) ] )', 9))  # LRA's bracketed form: '(' and ')' are the tree's shape, not lists.
  dataset, _ = input_pipeline.read_split(write_rows(tmp_path / 'depths.tsv', rows), max_length=40, num_classes=10)
  assert input_pipeline.expression_depths(dataset.arrays['inputs']).tolist() == [0, 1, 2, 3, 4, 5, 3, 1]
  assert input_pipeline.expression_lengths(dataset.arrays['inputs']).tolist()[:3] == [1, 4, 7]


def generated_ids(count: int, seed: int = 0) -> tuple[np.ndarray, list[int]]:
  options = generator.GeneratorOptions(max_depth=6, max_args=5, longer_than=5, shorter_than=120)
  samples = generator.generate(count, options, random.Random(seed))
  ids = np.zeros((count, 120), np.int32)
  for row, expression in enumerate(samples):
    tokens = input_pipeline.tokenize(expression)
    ids[row, :len(tokens)] = [input_pipeline.TOKEN_IDS[t] for t in tokens]
  return ids, list(samples.values())


def tokens_of(ids: np.ndarray) -> list[str]:
  return [VOCAB[i] for i in ids if i]


@pytest.mark.parametrize('options', [dict(shuffle_arguments=1.0, contract_subtrees=0.0),
                                     dict(shuffle_arguments=0.0, contract_subtrees=0.5), AUGMENT_ALL,
                                     dict(shuffle_arguments=0.0, contract_subtrees=1.0)])
def test_augmentation_keeps_every_label_by_the_independent_evaluator(options):
  ids, labels = generated_ids(3000)
  rng = np.random.default_rng(0)
  augmented = np.stack([augment.augment_expression(row, rng, **options) for row in ids])
  assert [generator.evaluate_tokens(tokens_of(row)) for row in augmented] == labels
  lengths, new_lengths = (input_pipeline.expression_lengths(a) for a in (ids, augmented))
  changed = (augmented != ids).any(axis=1).mean()
  if options['contract_subtrees']:
    assert (new_lengths <= lengths).all() and (new_lengths < lengths).mean() > 0.5
  else:  # A permutation: the same tokens, most expressions in another order.
    assert (new_lengths == lengths).all() and (np.sort(augmented, 1) == np.sort(ids, 1)).all() and changed > 0.9
  if options['contract_subtrees'] == 1.0:  # Every list below the root became its digit.
    assert (input_pipeline.expression_depths(augmented) == 1).all()


def test_augmented_batches_are_a_function_of_seed_step_and_row():
  ids, labels = generated_ids(64, seed=1)
  batches = lambda start: iter([{'inputs': ids[i * 8:(i + 1) * 8], 'targets': np.array(labels[i * 8:(i + 1) * 8])}
                                for i in range(start, 8)])
  config = augment.AugmentSettings(**AUGMENT_ALL)
  run = lambda start, seed=0: [b['inputs'] for b in augment.augmented_batches(
      batches(start), config, seed=seed, start=start, first_row=0)]
  straight = run(0)
  np.testing.assert_array_equal(np.stack(run(0)), np.stack(straight))  # Deterministic.
  np.testing.assert_array_equal(np.stack(run(3)), np.stack(straight[3:]))  # Resumed at step 3: the same batches.
  assert (np.stack(run(0, seed=1)) != np.stack(straight)).any()
  # Two hosts, each with half of every global batch: together the one-host batches.
  halves = [[b['inputs'] for b in augment.augmented_batches(
      iter([{'inputs': batch[rows]} for batch in [ids[i * 8:(i + 1) * 8] for i in range(8)]]), config, seed=0,
      start=0, first_row=rows.start)] for rows in (slice(0, 4), slice(4, 8))]
  np.testing.assert_array_equal(np.concatenate([np.stack(h) for h in halves], axis=1), np.stack(straight))


@pytest.mark.parametrize('key, value, message', [
    ('max_args', 1, r'data.generator: max_args=1 must be >= 2'),
    ('max_depth', 0, r'data.generator: max_depth=0 must be >= 1'),
    ('label_modulus', 10, r'data.generator.label_modulus=10 writes labels 0..9, more than data.num_classes=2')])
def test_generator_options_fail_before_any_data_is_made(key, value, message):
  config = lra.get_config('cpu')
  config.data.num_classes = 2
  config.data.generator[key] = value
  with pytest.raises(ValueError, match=message):
    train.create_task(config, '/nonexistent/never/written')


def test_given_data_keeps_its_own_labels_whatever_the_generator_would_write():
  """With data.data_dir set, nothing is generated: labels are the files', checked as they are read."""
  config = lra.get_config('cpu')
  config.data.update(data_dir='/nonexistent/never/read', num_classes=2)
  assert config.data.generator.label_modulus == 10
  assert listops_settings.create_model(config).num_classes == 2


@pytest.mark.parametrize('key, value', [('shuffle_arguments', 1.5), ('contract_subtrees', -0.1)])
def test_augmentation_probabilities_out_of_range_fail_before_training(tiny_data_dir, key, value):
  config = tiny_config(tiny_data_dir)
  config.data.augment[key] = value
  with pytest.raises(ValueError, match=rf'data.augment.{key}={value} must be >= 0 and <= 1 \(a probability\)'):
    train.create_task(config, '/nonexistent/never/written')


@pytest.fixture(scope='module')
def trained_run(tiny_data_dir, tmp_path_factory):
  workdir = tmp_path_factory.mktemp('trained') / 'run'
  results = run_listops(tiny_config(tiny_data_dir, num_train_steps=20), workdir)
  return str(workdir), results


def test_evaluating_the_test_file_gives_what_training_reported(trained_run, tiny_data_dir):
  workdir, results = trained_run
  report = evaluate.evaluate_file(workdir, os.path.join(tiny_data_dir, 'basic_test.tsv'), split_name='again')
  assert report['accuracy'] == pytest.approx(results['test']['accuracy'], abs=1e-6)
  assert report['loss'] == pytest.approx(results['test']['loss'], rel=1e-5)
  assert report['majority_class_accuracy'] == pytest.approx(results['baselines']['test_majority_class_accuracy'])
  assert report['best_step'] == results['best_step'] and report['examples'] == 40
  for key in ('by_depth', 'by_length'):
    groups = report[key].values()
    assert sum(g['examples'] for g in groups) == 40
    assert sum(g['accuracy'] * g['examples'] for g in groups) / 40 == pytest.approx(report['accuracy'])
  with open(os.path.join(workdir, 'evaluations', 'again.json')) as f:
    assert json.load(f) == report
  assert os.path.getsize(os.path.join(workdir, 'evaluations', 'again.png')) > 0


def test_evaluate_reports_bad_rows_with_file_and_line_or_counts_them(trained_run, tmp_path):
  workdir, _ = trained_run
  path = write_rows(tmp_path / 'other.tsv', [('[MAX 1 2 ]', 2), ('[MAX 1 [FOO 3 ] ]', 3), ('[MIN 4 5 ]', 4)])
  with pytest.raises(DataError, match=r"other.tsv:3: unknown token: '\[FOO'"):
    evaluate.evaluate_file(workdir, path)
  report = evaluate.evaluate_file(workdir, path, on_invalid='skip')
  assert report['examples'] == 2 and report['skipped'] == {'unknown token': 1}
  assert report['by_depth'] == {'1': {'examples': 2, 'accuracy': report['accuracy'], 'loss': report['loss'],
                                      'majority_class_accuracy': 0.5}}
  command = [sys.executable, '-m', 'lra_posenc.listops.evaluate', f'--workdir={workdir}', f'--data={path}']
  process = subprocess.run(command, capture_output=True, text=True, cwd=os.path.dirname(TESTS_DIR), timeout=120)
  assert process.returncode == 2
  assert process.stderr.splitlines()[-2].endswith("other.tsv:3: unknown token: '[FOO' is not in the ListOps "
                                                  'vocabulary; to skip such rows, run with --on_invalid=skip')
