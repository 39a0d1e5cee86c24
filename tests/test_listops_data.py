"""The ListOps generator and reader: determinism, correct labels, located errors."""
import filecmp
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import TINY_GENERATOR
from lra_posenc.data import listops
from lra_posenc.listops import input_pipeline

SIZES = dict(train=300, val=40, test=40)


def evaluate_expression(expression: str) -> int:
  """An evaluator written independently of the generator: a stack over the token stream."""
  stack: list = []
  for token in expression.replace('(', ' ').replace(')', ' ').split():
    if token.startswith('['):
      stack.append(token)
    elif token == ']':
      args = []
      while not isinstance(stack[-1], str):
        args.append(stack.pop())
      operator = stack.pop()
      values = sorted(args)
      if operator == '[MIN':
        stack.append(values[0])
      elif operator == '[MAX':
        stack.append(values[-1])
      elif operator == '[SM':
        stack.append(sum(values) % 10)
      else:
        middle = len(values) // 2
        stack.append(values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) // 2)
    else:
      stack.append(int(token))
  assert len(stack) == 1
  return stack[0]


def read_rows(path: str) -> list[tuple[str, int]]:
  with open(path) as f:
    assert f.readline() == 'Source\tTarget\n'
    return [(row.split('\t')[0], int(row.split('\t')[1])) for row in f.read().splitlines()]


def test_same_seed_same_bytes_and_other_seed_differs(tmp_path):
  first = listops.write_splits(str(tmp_path / 'a'), 7, SIZES, TINY_GENERATOR)
  second = listops.write_splits(str(tmp_path / 'b'), 7, SIZES, TINY_GENERATOR)
  other = listops.write_splits(str(tmp_path / 'c'), 8, SIZES, TINY_GENERATOR)
  for split in listops.SPLITS:
    assert filecmp.cmp(first[split], second[split], shallow=False)
    assert not filecmp.cmp(first[split], other[split], shallow=False)


def test_labels_lengths_and_disjoint_splits(tmp_path):
  options = listops.GeneratorOptions(max_depth=5, max_args=5, min_length=20, max_length=80)
  paths = listops.write_splits(str(tmp_path), 3, SIZES, options)
  seen = set()
  for split, path in paths.items():
    rows = read_rows(path)
    assert len(rows) == SIZES[split]
    expressions = {expression for expression, _ in rows}
    assert len(expressions) == len(rows) and not expressions & seen
    seen |= expressions
    for expression, label in rows:
      assert evaluate_expression(expression) == label, expression
      assert options.min_length < len(input_pipeline.tokenize(expression)) < options.max_length


def test_cli_writes_lra_files(tmp_path):
  listops.main(['--output_dir', str(tmp_path), '--seed', '1', '--num_train_samples', '20', '--num_valid_samples',
                '5', '--num_test_samples', '5', '--max_depth', '3', '--min_length', '2', '--max_length', '30'])
  assert sorted(os.listdir(tmp_path)) == ['basic_test.tsv', 'basic_train.tsv', 'basic_val.tsv']
  assert len(read_rows(tmp_path / 'basic_val.tsv')) == 5


def test_vocabulary_is_fixed_and_sorted():
  assert input_pipeline.VOCAB[0] == input_pipeline.PAD
  assert list(input_pipeline.VOCAB[1:]) == sorted(input_pipeline.VOCAB[1:])
  assert len(input_pipeline.VOCAB) == 16


def test_reads_official_lra_rows(tmp_path):
  path = tmp_path / 'basic_test.tsv'
  path.write_text('Source\tTarget\n( ( ( [MAX 2 ) 9 ) ] )\t9\n( ( ( ( [SM 3 ) 4 ) 5 ) ] )\t2\n')
  dataset, report = input_pipeline.read_split(str(path), max_length=8, num_classes=10)
  ids = input_pipeline.TOKEN_IDS
  np.testing.assert_array_equal(dataset.arrays['inputs'][0], [ids['[MAX'], ids['2'], ids['9'], ids[']'], 0, 0, 0, 0])
  np.testing.assert_array_equal(dataset.arrays['targets'], [9, 2])
  assert report.examples == 2 and not report.skipped


BAD_ROWS = {
    '( [MAX 2 ] )\t9\textra': 'wrong column count',
    '( [MAX 2 ] )\tnine': 'label not an integer',
    '( [MAX 2 ] )\t10': 'label out of range',
    '( [MAX 2 ] )\t-1': 'label out of range',
    '( [MAXX 2 ] )\t2': 'unknown token',
    '[MAX 1 2 3 4 5 6 7 8 9 ]\t9': 'too long',
    '( )\t1': 'empty expression',
}


@pytest.mark.parametrize('row,reason', BAD_ROWS.items())
def test_bad_rows_name_file_and_line(tmp_path, row, reason):
  path = tmp_path / 'basic_train.tsv'
  path.write_text(f'Source\tTarget\n[MAX 1 ]\t1\n{row}\n')
  with pytest.raises(input_pipeline.DataError, match=f'{path}:3: {reason}'):
    input_pipeline.read_split(str(path), max_length=8, num_classes=10)
  dataset, report = input_pipeline.read_split(str(path), max_length=8, num_classes=10, on_invalid='skip')
  assert dataset.size == 1 and report.skipped == {reason: 1}


@pytest.mark.parametrize('content,message', [
    (b'', ':1: empty file'), (b'Input\tLabel\n', ':1: expected the header'),
    (b'Source\tTarget\n', ':1: no examples'), (b'Source\tTarget\n[MAX 1 ]\t1\n[MAX \xff ]\t1\n', ':3: invalid UTF-8'),
])
def test_bad_files_are_located(tmp_path, content, message):
  path = tmp_path / 'basic_val.tsv'
  path.write_bytes(content)
  with pytest.raises(input_pipeline.DataError, match=f'{path}{message}'):
    input_pipeline.read_split(str(path), max_length=8, num_classes=10)


def test_missing_file_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match='basic_train.tsv'):
    input_pipeline.read_splits(str(tmp_path), max_length=8, num_classes=10, on_invalid='raise')


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('()[]MAXINEDS0123456789\t -x')), max_size=30))
def test_random_rows_are_read_or_rejected_with_location(tmp_path_factory, row):
  path = tmp_path_factory.mktemp('fuzz') / 'basic_train.tsv'
  path.write_text(f'Source\tTarget\n{row}\n[MAX 1 ]\t1\n')
  try:
    dataset, _ = input_pipeline.read_split(str(path), max_length=16, num_classes=10)
  except input_pipeline.DataError as error:
    assert str(error).startswith(f'{path}:2: ')
    return
  assert dataset.size in (1, 2)
  assert ((dataset.arrays['targets'] >= 0) & (dataset.arrays['targets'] < 10)).all()


def test_batches_are_deterministic_resumable_and_padded(tiny_data_dir):
  dataset, _ = input_pipeline.read_split(os.path.join(tiny_data_dir, 'basic_train.tsv'), max_length=24,
                                         num_classes=10)
  straight = dataset.train_batches(16, seed=0)
  first = [next(straight)['targets'] for _ in range(40)]  # 32 batches per epoch: crosses an epoch.
  resumed = dataset.train_batches(16, seed=0, start=25)
  for expected in first[25:]:
    np.testing.assert_array_equal(next(resumed)['targets'], expected)
  assert not np.array_equal(first[0], first[32])
  eval_batches = list(dataset.eval_batches(100))
  assert sum(b['weight'].sum() for b in eval_batches) == dataset.size
  assert all(len(b['weight']) == 100 for b in eval_batches)
