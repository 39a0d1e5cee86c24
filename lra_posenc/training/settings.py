"""The trainer's sections of a config, read and checked once, at the task's boundary, into frozen settings."""
import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import ml_collections

from lra_posenc.training import optim
from lra_posenc.training.config_checks import check_keys, section_keys
from lra_posenc.training.optim import OptimizerSettings
from lra_posenc.validation import check_positive, check_range

TOP_LEVEL_KEYS = ('task', 'seed', 'data', 'model', 'optimizer', 'training', 'evaluation', 'checkpoint')
# Model keys that say how the model is computed, not what it computes: a run may resume with them
# changed (on a GPU, with rematerialisation), so checkpoints do not record them.
HOW_THE_MODEL_COMPUTES = ('attention_implementation', 'remat', 'length_multiple')


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
  """Global examples per step, the step budget, steps between logs, and evaluations without a better
  selection metric before stopping early (0: never)."""
  batch_size: int
  num_train_steps: int
  log_every_steps: int
  patience: int


@dataclasses.dataclass(frozen=True)
class EvaluationSettings:
  """Global examples per evaluation batch, steps between evaluations, the validation metric that picks the best
  checkpoint, and how many last evaluations' parameters are averaged and scored (0: none)."""
  batch_size: int
  every_steps: int
  selection_metric: str
  average_last: int


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
  every_steps: int
  max_to_keep: int


# Each section's keys are its settings' fields, written once. The task checks evaluation.selection_metric.
TRAINING_KEYS = section_keys(TrainingSettings)
EVALUATION_KEYS = section_keys(EvaluationSettings)
CHECKPOINT_KEYS = section_keys(CheckpointSettings)


@dataclasses.dataclass(frozen=True)
class TrainerSettings:
  """What the train loop reads of a config: the seed, its four sections, the model as a checkpoint records it
  (what it computes, not how) and the whole config as config.json and results.json record it."""
  seed: int
  optimizer: OptimizerSettings
  training: TrainingSettings
  evaluation: EvaluationSettings
  checkpoint: CheckpointSettings
  model_record: dict[str, Any]
  config_record: dict[str, Any]


def read_trainer_settings(config: ml_collections.ConfigDict, task: str, task_sections: Sequence[str] = (),
                          task_training_keys: Sequence[str] = ()) -> TrainerSettings:
  """Checks `config.task` (the calling task's name) and the sections the trainer reads, then returns them as
  settings; tasks check `data`, `model`, `task_sections` and their own `training` keys (`task_training_keys`).
  Raises ValueError naming the bad key."""
  check_keys(config, 'config', TOP_LEVEL_KEYS + tuple(task_sections))
  if config.task != task:
    raise ValueError(f'config.task={config.task!r}, but this program trains {task!r}: the config is for '
                     'another task')
  check_keys(config.training, 'training', TRAINING_KEYS + tuple(task_training_keys))
  check_keys(config.evaluation, 'evaluation', EVALUATION_KEYS)
  check_keys(config.checkpoint, 'checkpoint', CHECKPOINT_KEYS)
  check_positive(config.training, 'training', 'batch_size', 'num_train_steps', 'log_every_steps')
  check_positive(config.evaluation, 'evaluation', 'batch_size', 'every_steps')
  for key in ('training.patience', 'evaluation.average_last'):  # 0: off.
    section, name = key.split('.')
    check_range(key, config[section][name], at_least=0)
  check_positive(config.checkpoint, 'checkpoint', *CHECKPOINT_KEYS)
  # jax.random.PRNGKey and NumPy's batch order read a seed modulo 2**32 or not at all: outside the range,
  # two seeds would share a dropout key but not a batch order, or fail late without naming the key.
  check_range('seed', config.seed, at_least=0, below=2**32)
  optimizer = optim.read_settings(config.optimizer)
  for path, size in (('training.batch_size', config.training.batch_size),
                     ('evaluation.batch_size', config.evaluation.batch_size)):
    if size % jax.device_count():
      raise ValueError(f'{path}={size} is not divisible by the {jax.device_count()} devices '
                       f'({jax.process_count()} process(es) x {jax.local_device_count()} local devices)')
  training, evaluation, checkpoint = config.training, config.evaluation, config.checkpoint
  return TrainerSettings(
      seed=int(config.seed), optimizer=optimizer,
      training=TrainingSettings(batch_size=training.batch_size, num_train_steps=training.num_train_steps,
                                log_every_steps=training.log_every_steps, patience=training.patience),
      evaluation=EvaluationSettings(batch_size=evaluation.batch_size, every_steps=evaluation.every_steps,
                                    selection_metric=evaluation.selection_metric,
                                    average_last=evaluation.average_last),
      checkpoint=CheckpointSettings(every_steps=checkpoint.every_steps, max_to_keep=checkpoint.max_to_keep),
      model_record={k: v for k, v in config.model.to_dict().items() if k not in HOW_THE_MODEL_COMPUTES},
      config_record=config.to_dict())
