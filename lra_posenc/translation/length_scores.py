"""The test translations a run wrote, scored by source length (`scripts/length_generalisation.py` compares runs
so)."""
from collections.abc import Sequence

import numpy as np

from lra_posenc.sweeps import bucket_label
from lra_posenc.training.checkpointing import read_config
from lra_posenc.translation import bleu, input_pipeline, train
from lra_posenc.translation.settings import read_data


def scores_by_length(workdir: str, bounds: Sequence[int], *, num_samples: int = 0, data_dir: str = ''
                     ) -> dict[str, dict]:
  """Per bucket of source length (SentencePiece ids): sacreBLEU of the written hypotheses, pooled over test splits.
  The run's own test splits are scored: `num_samples` and `data_dir` (of the tasks that draw sets) are unused."""
  del num_samples, data_dir
  data = read_data(read_config(workdir).data)
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
  edges = list(bounds[:-1]) + [bounds[-1], np.iinfo(np.int32).max]
  scores = {}
  for low, high in zip(edges[:-1], edges[1:]):
    rows = np.flatnonzero((lengths >= low) & (lengths < high))
    label = bucket_label(low, high) if high != edges[-1] else f'{low}+'
    if len(rows):
      score = bleu.sacrebleu_scores([hypotheses[i] for i in rows], [references[i] for i in rows],
                                    lowercase=tokenizers.lowercase)['bleu']
      scores[label] = {'score': score, 'examples': int(len(rows))}
  return scores
