"""The best checkpoint of a ListOps run scored by input length, on test sets drawn beyond its training lengths,
and by nesting depth of its own test split (`lra_posenc.studies.length_generalisation` compares runs so)."""
import dataclasses
import os
import random
from collections.abc import Sequence

import numpy as np

from lra_posenc import encodings
from lra_posenc.data import listops as generator
from lra_posenc.listops import input_pipeline, settings, train
from lra_posenc.listops.evaluate import evaluate_file, example_scores
from lra_posenc.run_folders import bucket_label
from lra_posenc.training.checkpointing import read_config, restore_best


def length_set(spec: dict, low: int, high: int, num_samples: int, data_dir: str) -> str:
  """basic-format TSV of `num_samples` expressions of low..high-1 tokens from generator `spec`, reused if present."""
  options = generator.GeneratorOptions.from_spec(spec, longer_than=low - 1, shorter_than=high)
  name = '_'.join(f'{k}{v}' for k, v in sorted(dataclasses.asdict(options).items()))
  path = os.path.join(data_dir, f'length_{bucket_label(low, high)}_seed{spec["seed"]}_n{num_samples}_{name}.tsv')
  if not os.path.exists(path):
    os.makedirs(data_dir, exist_ok=True)
    generator.write_tsv(path, generator.generate(num_samples, options, random.Random(spec['seed'] * 1_000_003 + low)))
  return path


def scores_by_length(workdir: str, bounds: Sequence[int], *, num_samples: int, data_dir: str) -> dict[str, dict]:
  """Per bucket [bounds[i], bounds[i+1]) of tokens, `num_samples` expressions drawn into `data_dir` from the run's
  own generator (and its own test split first): accuracy of the best checkpoint (None if the encoding cannot reach
  it) and the majority class."""
  config, params, _ = restore_best(workdir, settings.CONFIG_HISTORY)
  run = settings.read_scoring_settings(config)
  model, data = run.model, run.data
  test_dir = train.data_directory(data.data_dir, workdir)
  sets = {f'test (<= {data.max_length})': (os.path.join(test_dir, 'basic_test.tsv'), data.max_length)}
  for low, high in zip(bounds[:-1], bounds[1:]):
    sets[bucket_label(low, high)] = (length_set(data.generator, low, high, num_samples, data_dir),
                                     high - 1)
  scores = {}
  for label, (path, max_length) in sets.items():
    dataset, _ = input_pipeline.read_split(path, max_length=max_length, num_classes=data.num_classes,
                                           on_invalid=data.on_invalid)
    targets = dataset.arrays['targets']
    majority = float(np.bincount(targets).max() / len(targets))
    try:
      score = float(example_scores(model, params, dataset, run.batch_size)[1].mean())
    except encodings.CannotExtrapolate:
      score = None
    scores[label] = {'score': score, 'majority': majority, 'examples': len(targets)}
  return scores


def scores_by_depth(workdir: str) -> dict[str, dict]:
  """Per nesting depth of the run's own test split: accuracy of the best checkpoint and that depth's majority class."""
  data_dir = train.data_directory(read_config(workdir, settings.CONFIG_HISTORY).data.data_dir, workdir)
  report = evaluate_file(workdir, os.path.join(data_dir, 'basic_test.tsv'), split_name='test')
  return {depth: {'score': group['accuracy'], 'majority': group['majority_class_accuracy'],
                  'examples': group['examples']} for depth, group in report['by_depth'].items()}
