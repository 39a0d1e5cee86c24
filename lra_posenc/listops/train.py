"""Trains a Transformer classifier on LRA ListOps and scores its best checkpoint.

    python -m lra_posenc.listops.train --config=configs/listops/lra.py:cpu --workdir=/tmp/listops

With `data.data_dir` empty, a ListOps set is generated into WORKDIR/data first (from
`data.generator`); otherwise the directory must hold basic_{train,val,test}.tsv, ours
or LRA's release. Re-running the command on the same workdir resumes.
"""
import functools
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from lra_posenc.data import listops as generator
from lra_posenc.listops import augment, input_pipeline
from lra_posenc.listops.settings import DataSettings, read_settings
from lra_posenc.models import flops
from lra_posenc.models.classifier import TransformerClassifier
from lra_posenc.models.transformer import attention_paths, with_xla_attention
from lra_posenc.training import cli, distributed
from lra_posenc.training.batches import Batch, HostShard
from lra_posenc.training.task import Params, Task, Workload, synthetic_task

def classification_metrics(model: TransformerClassifier, params: Params, batch: Batch, rng: jax.Array | None
                           ) -> dict[str, jax.Array]:
  """Summed cross-entropy and correct predictions; padding rows (weight 0) contribute nothing."""
  nll, correct = example_outcomes(model, params, batch, rng)
  weight = batch['weight']
  real = weight > 0
  return {'loss': jnp.where(real, nll * weight, 0.0).sum(),
          'accuracy': jnp.where(real, correct.astype(jnp.float32) * weight, 0.0).sum(), 'count': weight.sum()}


def example_outcomes(model: TransformerClassifier, params: Params, batch: Batch, rng: jax.Array | None
                     ) -> tuple[jax.Array, jax.Array]:
  """Each example's cross-entropy and whether its most probable class is the label."""
  train = rng is not None
  rngs = {'dropout': rng, 'positions': jax.random.fold_in(rng, 1)} if train else {}
  logits = model.apply({'params': params}, batch['inputs'], train=train, rngs=rngs)
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
  nll = -jnp.take_along_axis(log_probs, batch['targets'][:, None], axis=-1)[:, 0]
  return nll, jnp.argmax(logits, -1) == batch['targets']


def prepare_data(data: DataSettings, workdir: str) -> str:
  """The data directory: `data.data_dir`, or a set generated into WORKDIR/data (reused when it matches).

  With several processes, process 0 generates and the others wait, then read.
  """
  data_dir = data_directory(data.data_dir, workdir)
  if data.data_dir:
    return data_dir
  shorter_than = data.generator['shorter_than']  # Here, not in read_data: benchmarks read such configs too.
  if shorter_than - 1 > data.max_length:
    raise ValueError(f'data.generator.shorter_than={shorter_than} would write expressions of up to '
                     f'{shorter_than - 1} tokens, more than data.max_length={data.max_length}')
  distributed.on_primary(lambda: generator.write_unless_present(data_dir, data.generator),
                         f'generating ListOps into {data_dir}')
  return data_dir


def data_command(config: ml_collections.ConfigDict, folder: str) -> list[str]:
  """The command (after the Python executable) that writes the set `config.data.generator` describes into
  `folder`, keeping one already there from the same settings: how a GPU campaign generates, once, the data its
  ListOps runs share (`TaskSpec.generated_data`)."""
  return ['-m', generator.__name__, f'--output_dir={folder}',
          *(f'--{key}={value}' for key, value in config.data.generator.items())]


def data_directory(data_dir: str, workdir: str) -> str:
  """Where a run's ListOps files are: `data.data_dir`, or WORKDIR/data where they were generated."""
  return data_dir or os.path.join(workdir, 'data')


def benchmark_workload(config: ml_collections.ConfigDict) -> Workload:
  """The classifier `config` describes, on random token sequences of `data.max_length`."""
  listops = read_settings(config)
  model, length = listops.model, listops.data.max_length

  def batch(examples: int, rng: np.random.Generator) -> Batch:
    return {'inputs': rng.integers(1, len(input_pipeline.VOCAB), (examples, length), dtype=np.int32),
            'targets': rng.integers(0, listops.data.num_classes, (examples,), dtype=np.int32),
            'weight': np.ones((examples,), np.float32)}

  example = np.zeros((1, length), np.int32)
  init = lambda rng: model.init({'params': rng}, example, train=False)['params']
  counted = with_xla_attention(model)
  forward = lambda params, tokens: counted.apply({'params': params}, tokens, train=False)
  return Workload(
      task=synthetic_task(listops.trainer, init,
                                       functools.partial(classification_metrics, model),
                                       attention_paths(model.config, model.attention_calls(length))),
      batch=batch,
      forward_flops=flops.forward_flops(forward, init, example),
      tokens_per_example=length,
      dtype=model.config.dtype.name)


def create_task(config: ml_collections.ConfigDict, workdir: str) -> Task:
  """Validates the whole config, then prepares data and model (generating data can take minutes)."""
  listops = read_settings(config)
  settings, data, model = listops.trainer, listops.data, listops.model
  datasets, reports = input_pipeline.read_splits(prepare_data(data, workdir), max_length=data.max_length,
                                                 num_classes=data.num_classes, on_invalid=data.on_invalid)
  for report in reports:
    logging.info(report.describe())
  test_labels = datasets['test'].arrays['targets']
  example = jnp.zeros((1, data.max_length), jnp.int32)

  def train_batches(start: int):
    shard = HostShard.current()
    batch_size = settings.training.batch_size
    batches = datasets['train'].train_batches(batch_size, seed=settings.seed, start=start, shard=shard)
    if not data.augment.active:
      return batches
    return augment.augmented_batches(batches, data.augment, seed=settings.seed, start=start,
                                     first_row=shard.slice(batch_size).start)

  return Task(
      init_params=lambda rng: model.init({'params': rng}, example, train=False)['params'],
      metrics=functools.partial(classification_metrics, model),
      train_batches=train_batches,
      train_batch_shapes=(datasets['train'].train_batch_shape(settings.training.batch_size),),
      eval_batches=lambda split: datasets[split].eval_batches(settings.evaluation.batch_size),
      artifacts={'vocab': list(input_pipeline.VOCAB)},
      settings=settings,
      attention_paths=attention_paths(model.config, model.attention_calls(data.max_length)),
      baselines={'test_majority_class_accuracy': float(np.bincount(test_labels).max() / len(test_labels))})


if __name__ == '__main__':
  cli.run_training(create_task, 'configs/listops/lra.py:cpu')
