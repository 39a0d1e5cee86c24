"""Text for causal language modelling: splits, a character (or byte) vocabulary, training windows, scoring windows.

Training batch i is a pure function of (seed, i): `batch_size` windows of `block_size + 1` tokens at offsets
drawn uniformly from the training split, as nanoGPT's `get_batch` draws them; resuming starts from the saved
index. Each host keeps its own contiguous rows of every global batch. A split is scored in non-overlapping
windows, each of its tokens but the first predicted once (Press et al. 2022's protocol).
"""
import dataclasses
import gzip
import os
from collections.abc import Callable, Iterator, Mapping

import jax
import numpy as np

from lra_posenc.data.files import DataError
from lra_posenc.training.batches import ArrayDataset, Batch, CountedBatches, HostShard

LEVELS = ('char', 'byte')
UNKNOWN_ID = 0  # A character training never saw: scored like any other, and counted.
# The files of a corpus in a directory (enwik8's and text8's standard split, as scripts/download_lm_data.py writes).
SPLIT_FILES = {'train': 'train.txt', 'validation': 'valid.txt', 'test': 'test.txt'}
# A change to a global batch's windows [batch, tokens] (passkeys planted), from a generator of its own.
WindowEdit = Callable[[np.ndarray, np.random.Generator], np.ndarray]
EDIT_STREAM = 1  # Seeds batch i's edit with (seed, i, this); its windows keep (seed, i).


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """Token ids of characters (`level` 'char': the training split's characters, sorted) or of UTF-8 bytes ('byte':
  all 256). Id 0 is the unknown character; the symbols take 1 ... len(symbols)."""
  level: str
  symbols: str  # The characters, in id order; empty at byte level.

  @classmethod
  def from_training_text(cls, level: str, text: str | bytes) -> 'Vocabulary':
    return cls(level, ''.join(sorted(set(text))) if level == 'char' else '')

  @classmethod
  def from_artifact(cls, artifact: Mapping) -> 'Vocabulary':
    return cls(artifact['level'], artifact['symbols'])

  def to_artifact(self) -> dict[str, str]:
    """As a checkpoint's artifacts keep it: a restored model reads the same ids."""
    return {'level': self.level, 'symbols': self.symbols}

  @property
  def size(self) -> int:
    return 1 + (len(self.symbols) if self.level == 'char' else 256)

  def encode(self, text: str | bytes) -> tuple[np.ndarray, int]:
    """int32 ids of `text` (bytes at byte level: any bytes) and how many of its characters the vocabulary lacks
    (each read as UNKNOWN_ID)."""
    if self.level == 'byte':
      raw = text if isinstance(text, bytes) else text.encode('utf-8')
      return np.frombuffer(raw, np.uint8).astype(np.int32) + 1, 0
    codes = np.frombuffer(text.encode('utf-32-le'), np.uint32)
    symbols = np.frombuffer(self.symbols.encode('utf-32-le'), np.uint32)  # Sorted, as sorted() orders str.
    where = np.searchsorted(symbols, codes)
    known = (where < len(symbols)) & (symbols[np.minimum(where, len(symbols) - 1)] == codes)
    return np.where(known, where + 1, UNKNOWN_ID).astype(np.int32), int((~known).sum())

  def decode(self, ids: np.ndarray) -> str:
    """The text of `ids`; the unknown id reads as U+FFFD, bytes that are not UTF-8 too."""
    ids = np.asarray(ids).reshape(-1)
    if self.level == 'byte':
      return bytes(int(i) - 1 for i in ids if i != UNKNOWN_ID).decode('utf-8', errors='replace')
    return ''.join(self.symbols[i - 1] if i != UNKNOWN_ID else '\ufffd' for i in ids)


def read_text(path: str, level: str = 'char') -> str | bytes:
  """A text file (gzip-compressed where it ends in .gz), whole: UTF-8 text, where invalid UTF-8 is a DataError at
  its line, or at byte level its bytes as they are (a corpus cut at a byte count, as enwik8's splits are, can cut
  a character)."""
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'rb') as f:
    raw = f.read()
  if level == 'byte':
    return raw
  try:
    return raw.decode('utf-8')
  except UnicodeDecodeError as error:
    raise DataError(path, raw.count(b'\n', 0, error.start) + 1, f'not UTF-8 ({error.reason})') from None


def read_splits(text_file: str, data_dir: str, validation_fraction: float, level: str = 'char'
                ) -> dict[str, tuple[str, str | bytes]]:
  """Split name -> (where it comes from, its text): `text_file` cut as nanoGPT cuts it (the first
  1 - `validation_fraction` trains, the rest validates), or `data_dir`'s train.txt, valid.txt and test.txt; read
  as `read_text` reads them at `level`."""
  if text_file:
    text = read_text(text_file, level)
    cut = int(len(text) * (1 - validation_fraction))
    unit = 'characters' if level == 'char' else 'bytes'
    return {'train': (f'{text_file} (first {cut} {unit})', text[:cut]),
            'validation': (f'{text_file} (last {len(text) - cut} {unit})', text[cut:])}
  splits = {}
  for split, name in SPLIT_FILES.items():
    path = os.path.join(data_dir, name)
    if not os.path.exists(path) and os.path.exists(path + '.gz'):
      path += '.gz'
    splits[split] = (path, read_text(path, level))
  return splits


@dataclasses.dataclass(frozen=True)
class TokenSplit:
  """One split's ids, where they come from, and how many of its characters the vocabulary lacks."""
  source: str
  ids: np.ndarray
  unknown: int

  def check_length(self, needed: int, why: str) -> None:
    """Refuses a split shorter than `needed` tokens, naming its file."""
    if len(self.ids) < needed:
      raise ValueError(f'{self.source}: {len(self.ids)} tokens, but {why} needs at least {needed}')

  def train_batches(self, batch_size: int, block_size: int, *, seed: int, start: int = 0,
                    shard: HostShard | None = None, edit: WindowEdit | None = None) -> Iterator[Batch]:
    """Endless batches of this host's rows of `batch_size` windows, from global batch index `start` on; `edit`
    changes each global batch's windows (passkeys) with a generator of its own, seeded (seed, index, EDIT_STREAM)."""
    self.check_length(block_size + 1, f'a training window of {block_size} tokens and its next token')
    rows = (shard or HostShard.current()).slice(batch_size)
    span = np.arange(block_size + 1)
    index = start
    while True:
      offsets = np.random.default_rng([seed, index]).integers(0, len(self.ids) - block_size, batch_size)
      windows = self.ids[offsets[:, None] + span]
      if edit is not None:
        windows = edit(windows, np.random.default_rng([seed, index, EDIT_STREAM]))
      windows = windows[rows]
      yield {'inputs': windows[:, :-1], 'targets': windows[:, 1:], 'mask': np.ones(windows[:, 1:].shape, np.float32),
             'weight': np.ones(len(windows), np.float32)}
      index += 1

  def scoring_windows(self, length: int, stride: int = 0) -> ArrayDataset:
    """Windows of `length` inputs and their next tokens in which every token but the first is scored once.

    Without `stride` (or with `stride` = `length`) the windows do not overlap. With a smaller `stride`, window k
    starts at k * stride and scores only its last `stride` targets, so every target but the first window's has at
    least `length - stride` tokens before it in its window; the first window scores all of its targets. The last
    window is padded, its padding masked.
    """
    self.check_length(2, 'scoring (a token and the next)')
    stride = stride or length
    if not 0 < stride <= length:
      raise ValueError(f'a scoring stride of {stride} tokens must be in [1, {length}], the window')
    targets = len(self.ids) - 1
    count = 1 + -(-max(targets - length, 0) // stride)
    positions = (np.arange(count) * stride)[:, None] + np.arange(length)
    padded = np.zeros(positions.max() + 2, np.int32)
    padded[:len(self.ids)] = self.ids
    scored = (np.arange(count)[:, None] == 0) | (np.arange(length) >= length - stride)
    return ArrayDataset({'inputs': padded[positions], 'targets': padded[positions + 1],
                         'mask': ((positions < targets) & scored).astype(np.float32)})

  def eval_batches(self, batch_size: int, length: int) -> CountedBatches:
    return self.scoring_windows(length).eval_batches(batch_size)


def train_batch_shape(batch_size: int, block_size: int, shard: HostShard | None = None) -> dict:
  """The shapes of this host's part of a training batch."""
  rows = (shard or HostShard.current()).slice(batch_size)
  rows = rows.stop - rows.start
  return {'inputs': jax.ShapeDtypeStruct((rows, block_size), np.int32),
          'targets': jax.ShapeDtypeStruct((rows, block_size), np.int32),
          'mask': jax.ShapeDtypeStruct((rows, block_size), np.float32),
          'weight': jax.ShapeDtypeStruct((rows,), np.float32)}


def tokenize_splits(texts: Mapping[str, tuple[str, str | bytes]], vocabulary: Vocabulary) -> dict[str, TokenSplit]:
  splits = {}
  for split, (source, text) in texts.items():
    ids, unknown = vocabulary.encode(text)
    splits[split] = TokenSplit(source, ids, unknown)
  return splits
