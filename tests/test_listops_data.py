"""The ListOps generator and reader: determinism, correct labels, batching (bad input: test_reliability)."""
import filecmp
import os

import numpy as np

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
  options = listops.GeneratorOptions(max_depth=5, max_args=5, longer_than=20, shorter_than=80)
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
      assert listops.evaluate_tokens(input_pipeline.tokenize(expression)) == label, expression
      assert options.longer_than < len(input_pipeline.tokenize(expression)) < options.shorter_than


def test_cli_writes_lra_files_and_keeps_them_for_the_same_arguments(tmp_path, capsys):
  arguments = ['--output_dir', str(tmp_path), '--num_train_samples', '20', '--num_valid_samples', '5',
               '--num_test_samples', '5', '--max_depth', '3', '--longer_than', '2', '--shorter_than', '30']
  listops.main([*arguments, '--seed', '1'])
  assert sorted(os.listdir(tmp_path)) == ['basic_test.tsv', 'basic_train.tsv', 'basic_val.tsv', 'generator.json']
  assert len(read_rows(tmp_path / 'basic_val.tsv')) == 5
  first = (tmp_path / 'basic_train.tsv').read_text()
  (tmp_path / 'basic_train.tsv').write_text('marked')  # Kept, not rewritten, when the arguments match.
  listops.main([*arguments, '--seed', '1'])
  assert (tmp_path / 'basic_train.tsv').read_text() == 'marked' and 'kept the matching' in capsys.readouterr().out
  listops.main([*arguments, '--seed', '2'])
  second = (tmp_path / 'basic_train.tsv').read_text()
  assert second != 'marked' and second != first


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
