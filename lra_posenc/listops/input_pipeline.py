"""Reads ListOps TSV files (LRA's release or our generator) into token arrays.

The vocabulary is fixed here, not collected from data: padding first, then the
sorted ListOps tokens. LRA built it from a Python `set`, whose order changes
between processes, so a restored model read different ids. Brackets `(` `)` only
record the generator's tree shape and are dropped, as in LRA.
"""
import dataclasses
import os

import numpy as np

from lra_posenc.data.files import DataError, decode_line
from lra_posenc.data.listops import END, OPERATORS
from lra_posenc.training.batches import ArrayDataset
from lra_posenc.validation import check_choice

PAD = '<pad>'
VOCAB: tuple[str, ...] = (PAD,) + tuple(sorted([str(d) for d in range(10)] + ['[MAX', '[MED', '[MIN', '[SM', ']']))
TOKEN_IDS = {token: i for i, token in enumerate(VOCAB)}
PAD_ID = TOKEN_IDS[PAD]
END_ID = TOKEN_IDS[END]
OPERATOR_IDS = {operator: TOKEN_IDS[operator] for operator in OPERATORS}
DROPPED_TOKENS = frozenset({'(', ')'})
HEADER = ('Source', 'Target')
SKIPPED_LINES_SHOWN = 5  # Line numbers of the first skipped rows, logged with the counts.
SPLIT_FILES = {'train': 'basic_train.tsv', 'validation': 'basic_val.tsv', 'test': 'basic_test.tsv'}
INVALID_ROW_POLICIES = ('raise', 'skip')


@dataclasses.dataclass
class ReadReport:
  """What reading a file kept and skipped: counts by reason, and the first skipped lines' numbers."""
  path: str
  examples: int = 0
  skipped: dict[str, int] = dataclasses.field(default_factory=dict)
  first_skipped_lines: list[int] = dataclasses.field(default_factory=list)

  def describe(self) -> str:
    if not self.skipped:
      return f'{self.path}: {self.examples} examples'
    lines = ', '.join(map(str, self.first_skipped_lines))
    more = ', ...' if sum(self.skipped.values()) > len(self.first_skipped_lines) else ''
    return f'{self.path}: {self.examples} examples; skipped {self.skipped} at line(s) {lines}{more}'


def tokenize(expression: str) -> list[str]:
  return [t for t in expression.split() if t not in DROPPED_TOKENS]


def read_split(path: str, *, max_length: int, num_classes: int, on_invalid: str = 'raise',
               skip_option: str = '--config.data.on_invalid=skip') -> tuple[ArrayDataset, ReadReport]:
  """Reads one TSV file into `inputs` [N, max_length] (padded token ids) and `targets` [N].

  Invalid rows (wrong column count, bad label, unknown token, too long) raise a
  `DataError` naming the file and line (and `skip_option`, the calling command's way to
  skip them), or with on_invalid='skip' are counted by reason.
  """
  check_choice('data.on_invalid', on_invalid, INVALID_ROW_POLICIES)
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{path}: no such ListOps file')
  report = ReadReport(path)
  inputs, targets = [], []
  with open(path, 'rb') as f:
    lines = enumerate(f, start=1)
    header = decode_line(path, *next(lines, (1, b'')))
    if not header:
      raise DataError(path, 1, 'empty file: expected the header "Source<TAB>Target"')
    if tuple(header.split('\t')) != HEADER:
      raise DataError(path, 1, f'expected the header "Source<TAB>Target", got {header[:80]!r}')
    for line_number, raw in lines:
      line = decode_line(path, line_number, raw)
      if not line:
        continue
      try:
        ids, label = _parse_row(line, max_length, num_classes)
      except ValueError as error:
        if on_invalid == 'raise':
          raise DataError(path, line_number, f'{error}; to skip such rows, run with {skip_option}') from None
        reason = str(error).split(':')[0]
        report.skipped[reason] = report.skipped.get(reason, 0) + 1
        if len(report.first_skipped_lines) < SKIPPED_LINES_SHOWN:
          report.first_skipped_lines.append(line_number)
        continue
      inputs.append(ids)
      targets.append(label)
  if not inputs:
    raise DataError(path, 1, 'no examples')
  padded = np.zeros((len(inputs), max_length), np.int32)
  for row, ids in enumerate(inputs):
    padded[row, :len(ids)] = ids
  report.examples = len(inputs)
  return ArrayDataset({'inputs': padded, 'targets': np.asarray(targets, np.int32)}), report


def _parse_row(line: str, max_length: int, num_classes: int) -> tuple[list[int], int]:
  columns = line.split('\t')
  if len(columns) != 2:
    raise ValueError(f'wrong column count: expected 2 tab-separated columns, got {len(columns)}')
  expression, label_text = columns
  try:
    label = int(label_text)
  except ValueError:
    raise ValueError(f'label not an integer: {label_text[:20]!r}') from None
  if not 0 <= label < num_classes:
    raise ValueError(f'label out of range: {label} is not in 0..{num_classes - 1}')
  tokens = tokenize(expression)
  unknown = [t for t in tokens if t not in TOKEN_IDS]
  if unknown:
    raise ValueError(f'unknown token: {unknown[0][:20]!r} is not in the ListOps vocabulary')
  if not tokens:
    raise ValueError('empty expression: no tokens')
  if len(tokens) > max_length:
    raise ValueError(f'too long: {len(tokens)} tokens > data.max_length={max_length}')
  return [TOKEN_IDS[t] for t in tokens], label


def expression_depths(inputs: np.ndarray) -> np.ndarray:
  """Nesting depth of each padded expression [N, length]: the most lists open at once (a lone digit: 0)."""
  opens = np.isin(inputs, list(OPERATOR_IDS.values())).astype(np.int32) - (inputs == END_ID)
  return np.maximum(np.cumsum(opens, axis=1).max(axis=1), 0)


def expression_lengths(inputs: np.ndarray) -> np.ndarray:
  """Tokens of each padded expression [N, length] (operators, digits and ']', as the model reads them)."""
  return (inputs != PAD_ID).sum(axis=1)


def read_splits(data_dir: str, *, max_length: int, num_classes: int, on_invalid: str
                ) -> tuple[dict[str, ArrayDataset], list[ReadReport]]:
  datasets, reports = {}, []
  for split, filename in SPLIT_FILES.items():
    datasets[split], report = read_split(os.path.join(data_dir, filename), max_length=max_length,
                                         num_classes=num_classes, on_invalid=on_invalid)
    reports.append(report)
  return datasets, reports
