"""Parallel text -> SentencePiece ids, for Multi30k, any corpus laid out as SPLIT.LANG[.gz], and TFDS.

A corpus directory holds one file per split and language, one sentence per line, plain
or gzip: `train.en.gz`, `train.de.gz`, `val.en.gz`, ... (Multi30k's published layout).
TFDS translation datasets are read by name instead.
The tokenizer is trained on the training split only, saved in the workdir and reused
from there, so a resumed or re-scored run reads the same ids.
"""
import dataclasses
import hashlib
import io
import os
import time
from collections.abc import Iterable, Sequence

import numpy as np
import sentencepiece as spm
from absl import logging

from lra_posenc.data.files import DataError, decode_line, read_lines, written_whole
from lra_posenc.training.batches import ArrayDataset

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class ParallelText:
  sources: list[str]
  targets: list[str]
  source_path: str
  target_path: str


@dataclasses.dataclass
class EncodeReport:
  """What encoding a split kept and changed, by reason."""
  split: str
  examples: int = 0
  skipped: dict[str, int] = dataclasses.field(default_factory=dict)
  truncated: int = 0


def split_path(data_dir: str, split: str, lang: str) -> str:
  """`data_dir/split.lang.gz` or `data_dir/split.lang`, whichever exists."""
  candidates = [os.path.join(data_dir, f'{split}.{lang}{suffix}') for suffix in ('.gz', '')]
  for path in candidates:
    if os.path.isfile(path):
      return path
  raise FileNotFoundError(f'no {lang} file for split {split!r}: tried {candidates}')


def read_parallel(source_path: str, target_path: str) -> ParallelText:
  """Aligned sentences of two files; files of different line counts are an error naming both."""
  sources, targets = read_lines(source_path), read_lines(target_path)
  if len(sources) != len(targets):
    raise DataError(source_path, len(sources),
                    f'{len(sources)} lines in {source_path} but {len(targets)} lines in {target_path}; '
                    'parallel files must align line by line')
  if not sources:
    raise DataError(source_path, 0, 'empty file')
  return ParallelText(sources, targets, source_path, target_path)


def read_split(data_dir: str, split: str, source_lang: str, target_lang: str) -> ParallelText:
  return read_parallel(split_path(data_dir, split, source_lang), split_path(data_dir, split, target_lang))


def read_tfds_split(name: str, split: str, source_lang: str, target_lang: str, data_dir: str | None) -> ParallelText:
  """A split of a TFDS translation dataset (e.g. 'ted_hrlr_translate/pt_to_en'), prepared by TFDS if needed.

  Read through `tfds.data_source`, which needs no TensorFlow; builders that do need it
  (the WMT family) fail inside TFDS with its own message.
  """
  import tensorflow_datasets as tfds  # Imported here: slow to import, and only this path needs it.
  source = tfds.data_source(name, split=split, data_dir=data_dir or None)
  location = f'tfds:{name}[{split}]'
  sources, targets = [], []
  for index in range(len(source)):
    record = source[index]
    missing = [lang for lang in (source_lang, target_lang) if lang not in record]
    if missing:
      raise DataError(location, index, f'no {missing[0]!r} field; the record has {sorted(record)}')
    sources.append(_text(record[source_lang], location, index))
    targets.append(_text(record[target_lang], location, index))
  if not sources:
    raise DataError(location, 0, 'empty split')
  return ParallelText(sources, targets, location, location)


def _text(value: str | bytes, location: str, index: int) -> str:
  return decode_line(location, index, value) if isinstance(value, bytes) else value


def train_tokenizer(sentences: Iterable[str], *, vocab_size: int, model_type: str,
                    character_coverage: float) -> bytes:
  """A serialized SentencePiece model with pad/unk/bos/eos = 0/1/2/3, trained deterministically."""
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size, model_type=model_type,
      character_coverage=character_coverage, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
      num_threads=1, shuffle_input_sentence=False, input_sentence_size=0, hard_vocab_limit=False,
      minloglevel=2)
  return model.getvalue()


@dataclasses.dataclass(frozen=True)
class Tokenizers:
  """Source and target SentencePiece models (the same one for a joint vocabulary), and whether they read
  lowercased text (then their outputs are lowercase too)."""
  source: spm.SentencePieceProcessor
  target: spm.SentencePieceProcessor
  fingerprints: dict[str, str | bool]
  lowercase: bool = False

  @property
  def joint(self) -> bool:
    return self.source is self.target

  def encode_sources(self, sentences: Sequence[str]) -> list[list[int]]:
    return self.source.encode(fold_case(sentences, self.lowercase))

  def encode_targets(self, sentences: Sequence[str]) -> list[list[int]]:
    return self.target.encode(fold_case(sentences, self.lowercase))


def tokenizer_names(joint: bool) -> tuple[str, ...]:
  return ('joint',) if joint else ('source', 'target')


def fold_case(sentences: Sequence[str], lowercase: bool) -> list[str]:
  """`sentences` lowercased by `str.lower` when `lowercase` (it keeps German's ß, which Unicode case folding
  would turn into ss), else as they are."""
  return [s.lower() for s in sentences] if lowercase else list(sentences)


def write_missing_tokenizers(directory: str, train: ParallelText, *, joint: bool, vocab_size: int, model_type: str,
                             character_coverage: float, lowercase: bool = False) -> None:
  """Trains and saves those of `directory/{joint|source|target}.model` that do not exist yet, on the training
  text lowercased if `lowercase`."""
  os.makedirs(directory, exist_ok=True)
  sources, targets = fold_case(train.sources, lowercase), fold_case(train.targets, lowercase)
  corpora = {'joint': sources + targets, 'source': sources, 'target': targets}
  for name in tokenizer_names(joint):
    path = os.path.join(directory, f'{name}.model')
    if not os.path.exists(path):
      logging.info('training the %s SentencePiece tokenizer (%d pieces) on %d sentences: one call, no progress '
                   'reports', name, vocab_size, len(corpora[name]))
      start = time.perf_counter()
      proto = train_tokenizer(corpora[name], vocab_size=vocab_size, model_type=model_type,
                              character_coverage=character_coverage)
      logging.info('trained the %s tokenizer in %.1f s', name, time.perf_counter() - start)
      with written_whole(path, 'wb') as f:
        f.write(proto)


def load_tokenizers(directory: str, *, joint: bool, lowercase: bool = False) -> Tokenizers:
  """The models `write_missing_tokenizers` saved; `lowercase` must be what they were trained with."""
  processors, fingerprints = {}, {}
  for name in tokenizer_names(joint):
    path = os.path.join(directory, f'{name}.model')
    if not os.path.isfile(path):
      raise FileNotFoundError(f'{path}: no tokenizer model (it is written when training starts)')
    with open(path, 'rb') as f:
      proto = f.read()
    processors[name] = spm.SentencePieceProcessor(model_proto=proto)
    fingerprints[f'{name}.model'] = hashlib.sha256(proto).hexdigest()
  if lowercase:  # Part of what a checkpoint is only valid with; absent when off, as before the option.
    fingerprints['lowercase'] = True
  if joint:
    return Tokenizers(processors['joint'], processors['joint'], fingerprints, lowercase)
  return Tokenizers(processors['source'], processors['target'], fingerprints, lowercase)


def tokenizer_directory(workdir: str) -> str:
  """Where a translation run keeps its SentencePiece models (written once, read on every resume)."""
  return os.path.join(workdir, 'tokenizer')


def workdir_tokenizers(workdir: str, *, joint: bool, lowercase: bool) -> Tokenizers:
  """The tokenizers a translation run saved in `workdir`, as its `data.tokenizer` says: one joint model or two,
  for lowercased text or not."""
  return load_tokenizers(tokenizer_directory(workdir), joint=joint, lowercase=lowercase)


def encode_split(text: ParallelText, tokenizers: Tokenizers, *, split: str, max_length: int, train: bool
                 ) -> tuple[ArrayDataset, EncodeReport]:
  """`inputs` and `targets` [N, max_length]: ids then EOS, padded with PAD_ID; `lengths` [N] the longer side.

  Training drops pairs with an empty side or more than max_length ids with EOS, counted
  by reason. Evaluation keeps every pair (its references are scored whole) and cuts ids
  beyond max_length, counting the pairs cut.
  """
  report = EncodeReport(split)
  sources = tokenizers.encode_sources(text.sources)
  targets = tokenizers.encode_targets(text.targets)
  kept_sources, kept_targets = [], []
  for source_ids, target_ids, source, target in zip(sources, targets, text.sources, text.targets):
    reason = None
    if not source.strip() or not target.strip():
      reason = 'empty'
    elif max(len(source_ids), len(target_ids)) + 1 > max_length:
      reason = 'too long'
    if reason and train:
      report.skipped[reason] = report.skipped.get(reason, 0) + 1
      continue
    report.truncated += reason == 'too long'
    kept_sources.append(source_ids)
    kept_targets.append(target_ids)
  if not kept_sources:
    raise DataError(text.source_path, 0, f'no pairs left after filtering: skipped {report.skipped}')
  report.examples = len(kept_sources)
  lengths = [min(max(len(s), len(t)) + 1, max_length) for s, t in zip(kept_sources, kept_targets)]
  return ArrayDataset({'inputs': pad_ids(kept_sources, max_length), 'targets': pad_ids(kept_targets, max_length),
                       'lengths': np.asarray(lengths, np.int32)}), report


def pad_ids(sequences: Sequence[Sequence[int]], length: int) -> np.ndarray:
  """[N, length] int32: each sequence's ids, then EOS, then PAD_ID; cut to `length` with EOS last."""
  padded = np.full((len(sequences), length), PAD_ID, np.int32)
  for row, ids in enumerate(sequences):
    ids = list(ids)[:length - 1] + [EOS_ID]
    padded[row, :len(ids)] = ids
  return padded


def decode_ids(tokenizer: spm.SentencePieceProcessor, ids: np.ndarray) -> str:
  """Detokenized text of one output row, up to (not including) its first EOS."""
  ids = [int(i) for i in ids]
  if EOS_ID in ids:
    ids = ids[:ids.index(EOS_ID)]
  return tokenizer.decode([i for i in ids if i != PAD_ID])
