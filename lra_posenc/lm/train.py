"""Trains a causal Transformer language model on text and scores its best checkpoint.

    python -m lra_posenc.lm.train --config=configs/lm/shakespeare_char.py:cpu --workdir=runs/lm_cpu \\
        --config.data.text_file=data/tinyshakespeare/input.txt

The vocabulary (the training split's characters, or bytes) is saved with every checkpoint and a resume
with another is refused. Validation and test scores are the mean loss per token (nats) and bits per token
over the whole split, in non-overlapping windows of `data.block_size`. Re-running the command on the same
workdir resumes.
"""
import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from lra_posenc.lm import input_pipeline, scoring
from lra_posenc.lm.input_pipeline import Vocabulary
from lra_posenc.lm.passkey import PasskeyScorer
from lra_posenc.lm.settings import read_settings
from lra_posenc.models import flops
from lra_posenc.models.language_model import LanguageModel, next_token_sums
from lra_posenc.models.transformer import attention_paths, with_xla_attention
from lra_posenc.training import cli
from lra_posenc.training.batches import Batch
from lra_posenc.training.task import Params, Task, Workload, synthetic_task


def language_model_metrics(model: LanguageModel, params: Params, batch: Batch, rng: jax.Array | None
                           ) -> dict[str, jax.Array]:
  """Sums over the batch's target tokens (its mask, times its row's weight: 0 for evaluation padding)."""
  train = rng is not None
  rngs = {'dropout': rng, 'positions': jax.random.fold_in(rng, 1)} if train else {}
  logits = model.apply({'params': params}, batch['inputs'], train=train, rngs=rngs)
  return next_token_sums(logits, batch['targets'], batch['mask'] * batch['weight'][:, None])


def benchmark_workload(config: ml_collections.ConfigDict) -> Workload:
  """The model `config` describes, on random windows of `data.block_size` tokens from a 65-character vocabulary
  (Tiny Shakespeare's; no text read)."""
  settings = read_settings(config)
  block_size = settings.data.block_size
  model = settings.model.clone(vocab_size=1 + 65)

  def batch(examples: int, rng: np.random.Generator) -> Batch:
    ids = rng.integers(1, model.vocab_size, (examples, block_size + 1), dtype=np.int32)
    return {'inputs': ids[:, :-1], 'targets': ids[:, 1:], 'mask': np.ones((examples, block_size), np.float32),
            'weight': np.ones((examples,), np.float32)}

  example = np.zeros((1, block_size), np.int32)
  init = lambda rng: model.init({'params': rng}, example, train=False)['params']
  counted = with_xla_attention(model)
  forward = lambda params, tokens: counted.apply({'params': params}, tokens, train=False)
  return Workload(
      task=synthetic_task(settings.trainer, init, functools.partial(language_model_metrics, model),
                                       attention_paths(model.config, model.attention_calls(block_size))),
      batch=batch,
      forward_flops=flops.forward_flops(forward, init, example),
      tokens_per_example=block_size,
      dtype=model.config.dtype.name)


def create_task(config: ml_collections.ConfigDict, workdir: str) -> Task:
  """Validates the config, reads the text, takes the vocabulary from the training split and builds the task."""
  del workdir  # Everything the task keeps (its vocabulary) is a checkpoint artifact.
  settings = read_settings(config)
  data, trainer_settings = settings.data, settings.trainer
  texts = input_pipeline.read_splits(data.text_file, data.data_dir, data.validation_fraction, data.level)
  vocabulary = Vocabulary.from_training_text(data.level, texts['train'][1])
  splits = input_pipeline.tokenize_splits(texts, vocabulary)
  splits['train'].check_length(data.block_size + 1, f'a training window (data.block_size={data.block_size}) and '
                                                    'its next token')
  for name in ('validation',) + data.test_splits:
    splits[name].check_length(2, 'scoring (a token and the next)')
  for name, split in splits.items():
    logging.info('%s: %d tokens from %s; %d character(s) outside the vocabulary', name, len(split.ids),
                 split.source, split.unknown)
  logging.info('vocabulary: %d tokens (%s level)', vocabulary.size, data.level)
  passkey = data.passkey(vocabulary.size)
  if passkey:
    logging.info('passkeys of %d symbols in %.0f%% of training windows: ids %d-%d', passkey.length,
                 100 * data.passkey_fraction, passkey.first_id, passkey.first_id + passkey.num_ids - 1)
  model = settings.model.clone(vocab_size=data.model_vocab_size(vocabulary.size))
  batch_size, block_size = trainer_settings.training.batch_size, data.block_size
  example = jnp.zeros((1, block_size), jnp.int32)
  scorer = scoring.LengthScorer(model, block_size, settings.scoring.length_multiples, settings.scoring.sliding_stride,
                                trainer_settings.evaluation.batch_size,
                                scoring.stretch_options(model, settings.scoring.stretch_options),
                                drawn_positions=settings.scoring.positions == 'drawn',
                                position_draws=settings.scoring.position_draws,
                                passkey_scorer=passkey and PasskeyScorer(
                                    model, passkey, settings.scoring.passkey_depths, settings.scoring.passkey_trials))
  edit = passkey and functools.partial(passkey.carry, fraction=data.passkey_fraction)
  return Task(
      init_params=lambda rng: model.init({'params': rng}, example, train=False)['params'],
      metrics=functools.partial(language_model_metrics, model),
      train_batches=lambda start: splits['train'].train_batches(batch_size, block_size, seed=trainer_settings.seed,
                                                                start=start, edit=edit),
      train_batch_shapes=(input_pipeline.train_batch_shape(batch_size, block_size),),
      eval_batches=lambda split: splits[split].eval_batches(trainer_settings.evaluation.batch_size, block_size),
      artifacts={'vocabulary': vocabulary.to_artifact()},
      settings=trainer_settings,
      attention_paths=attention_paths(model.config, model.attention_calls(block_size)),
      baselines={'uniform_bits_per_token': float(np.log2(vocabulary.size))},
      data_report={f'{name}_characters_outside_vocabulary': split.unknown for name, split in splits.items()
                   if name != 'train'},
      test_splits=data.test_splits,
      score_test=lambda params, split, which: scorer.score(params, splits[split], f'{which}: scoring {split}'),
      count_unit='tokens')


if __name__ == '__main__':
  cli.run_training(create_task, 'configs/lm/shakespeare_char.py:cpu')
