"""Test BLEU by source length, for `lra_posenc.studies.length_generalisation`: from the translations a run wrote, or,
for a committed run (which keeps neither translations nor tokenizer), from the sentence statistics it recorded."""
import os
from collections.abc import Sequence

import numpy as np

from lra_posenc.run_folders import bucket_label
from lra_posenc.translation import bleu, input_pipeline, train
from lra_posenc.translation.settings import read_run_data


def scores_by_length(workdir: str, bounds: Sequence[int], *, num_samples: int = 0, data_dir: str = ''
                     ) -> dict[str, dict]:
  """Per bucket of source length (SentencePiece ids): sacreBLEU of the written hypotheses, pooled over test splits.
  The run's own test splits are scored: `num_samples` and `data_dir` (of the tasks that draw sets) are unused."""
  del num_samples, data_dir
  data = read_run_data(workdir)
  tokenizers = input_pipeline.workdir_tokenizers(workdir, joint=data.tokenizer.joint,
                                                 lowercase=data.tokenizer.lowercase)
  sources, hypotheses, references = [], [], []
  for split in data.test_splits:
    text = train.read_text(data, split)
    written = train.read_translations(
        train.translations_path(workdir, split, data.target_lang), len(text.targets))
    sources += text.sources
    hypotheses += written
    references += text.targets
  lengths = np.array([len(ids) for ids in tokenizers.encode_sources(sources)])
  return {label: {'score': bleu.sacrebleu_scores([hypotheses[i] for i in rows], [references[i] for i in rows],
                                                 lowercase=tokenizers.lowercase)['bleu'],
                  'examples': int(len(rows))}
          for label, rows in buckets(lengths, bounds)}


def recorded_scores_by_length(run_dir: str, bounds: Sequence[int], *, checkpoint: str, bleu_name: str,
                              data_dir: str) -> dict[str, dict] | None:
  """Per bucket of source length in words (whitespace-separated, the same for every run): BLEU `bleu_name` of
  `checkpoint`, from RUN_DIR/bleu_statistics.json pooled over the run's test splits, whose text is read from
  `data_dir` (the run's own may be another machine's path); None for a run that recorded no statistics."""
  if not os.path.isfile(bleu.statistics_path(run_dir)):
    return None
  data = read_run_data(run_dir, data_dir)
  protocol = bleu.protocols(data)[bleu_name]
  lengths, statistics = [], []
  for split in data.test_splits:
    recorded = bleu.read_statistics(run_dir, checkpoint, split, bleu_name, protocol)
    if recorded is None:
      raise FileNotFoundError(f'{bleu.statistics_path(run_dir)}: no {bleu_name} statistics of the {checkpoint} '
                              f'checkpoint on {split}')
    sources = train.read_text(data, split).sources
    if len(sources) != len(recorded.statistics):
      raise ValueError(f'{bleu.statistics_path(run_dir)}: {len(recorded.statistics)} sentences of {split}, but '
                       f'{data_dir} has {len(sources)}')
    lengths += [len(source.split()) for source in sources]
    statistics.append(recorded.statistics)
  statistics = np.concatenate(statistics)
  return {label: {'score': protocol.score_of_sums(statistics[rows].sum(0)), 'examples': int(len(rows))}
          for label, rows in buckets(np.array(lengths), bounds)}


def buckets(lengths: np.ndarray, bounds: Sequence[int]) -> list[tuple[str, np.ndarray]]:
  """(label, indices) of the non-empty buckets [bounds[i], bounds[i+1]) of `lengths`, the last open-ended."""
  edges = list(bounds) + [np.iinfo(np.int32).max]
  labelled = [(bucket_label(low, high) if high != edges[-1] else f'{low}+',
               np.flatnonzero((lengths >= low) & (lengths < high))) for low, high in zip(edges[:-1], edges[1:])]
  return [(label, rows) for label, rows in labelled if len(rows)]
