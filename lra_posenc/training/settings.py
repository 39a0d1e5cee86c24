"""The trainer's sections of a config, read and checked once, at the task's boundary, into frozen settings.

Fail-fast validation, so a typo is an error before anything compiles: unknown keys, renamed keys and older run
configs read as today's (`ConfigHistory`). The optimizer: AdamW with warmup and a choice of decay, from
`config.optimizer` read once into `OptimizerSettings`. Then the trainer's own sections (training, evaluation,
checkpoints) into `TrainerSettings`.
"""
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import ml_collections
import optax

from lra_posenc import encodings
from lra_posenc.validation import check_positive, check_range, check_section_choice

SettingsT = TypeVar('SettingsT')


# Keys that had two meanings, or one name with another key, and what replaced them.
RENAMED = {
    'data.max_eval_length': 'data.max_eval_source_length (evaluated sources are cut to it) and '
                            'decoding.max_output_length (the longest translation)',
    'data.generator.min_length': 'data.generator.longer_than (exclusive, as in LRA)',
    'data.generator.max_length': 'data.generator.shorter_than (exclusive, as in LRA; data.max_length is inclusive)',
}


def check_keys(section: ml_collections.ConfigDict, path: str, allowed: Iterable[str],
               optional: Iterable[str] = ()) -> None:
  """Every key of `section` must be one the code reads, and every read key must be present but the `optional`
  ones (read where set)."""
  optional = list(optional)
  allowed = list(allowed) + optional
  for key in section.keys():
    if f'{path}.{key}' in RENAMED:
      raise ValueError(f'{path}.{key} was renamed; use {RENAMED[f"{path}.{key}"]}')
    if key not in allowed:
      raise ValueError(f'{path}.{key} is not a config key the code reads; valid keys of {path}: {allowed}')
  missing = [key for key in allowed if key not in section and key not in optional]
  if missing:
    raise ValueError(f'{path} lacks key(s) {missing}')


@dataclasses.dataclass(frozen=True)
class ConfigHistory:
  """How one task's config.json files written before its latest keys read today.

  Attributes:
    data_key: the task's own key of `config.data`, which says that the task wrote a config.json from before
      configs had `task` (every one committed under results/ up to 2026-11-28); None for a task younger.
    upgrade: sets, in such an old config (a dict), the task's keys added since, at the values that give the
      behaviour from before.
  """
  data_key: str | None = None
  upgrade: Callable[[dict], None] | None = None


def task_of(config: Mapping, histories: Mapping[str, ConfigHistory]) -> str:
  """The task whose program wrote `config`: its `task`, or in an older config.json the task of `histories` (task
  -> its history) whose data key its data section holds."""
  if 'task' in config:
    return config['task']
  keys = {task: history.data_key for task, history in histories.items() if history.data_key}
  for task, key in keys.items():
    if key in config['data']:
      return task
  marks = f'neither task nor any of {[f"data.{key}" for key in keys.values()]}' if keys else 'no task'
  raise ValueError(f'a config with {marks}: no task of {sorted(histories)} wrote it')


def upgrade_old_config(config: dict, histories: Mapping[str, ConfigHistory]) -> dict:
  """A config.json written before keys were added (a dict), with them, at the values that give the behaviour from
  before: `task`, optimizer.min_learning_rate (a cosine decayed to 0), unselected encodings' options at a former
  default (`encodings.upgrade_config`), and those its task's history adds.

  Only these: they are what config.json files committed under results/ lack (2026-12-02;
  tests/test_experiments.py reads every one).
  """
  config.setdefault('task', task_of(config, histories))
  config['optimizer'].setdefault('min_learning_rate', 0.0)
  encodings.upgrade_config(config['model'])
  history = histories.get(config['task'])
  if history is not None and history.upgrade is not None:
    history.upgrade(config)
  return config


def section_keys(settings: type) -> tuple[str, ...]:
  """The config keys of a section read into the dataclass `settings`: its fields, the schema written once."""
  return tuple(field.name for field in dataclasses.fields(settings))


def read_section(section: ml_collections.ConfigDict, path: str, settings: type[SettingsT]) -> SettingsT:
  """`section` (at `path`) as the dataclass `settings`, its keys checked against the fields first."""
  check_keys(section, path, section_keys(settings))
  return settings(**section.to_dict())


SCHEDULES = ('rsqrt', 'cosine', 'constant')


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
  """`config.optimizer`, checked: the peak learning rate, its schedule (one of SCHEDULES) after `warmup_steps`
  of linear warmup and where a cosine ends (`min_learning_rate`), Adam's moments and epsilon, decoupled weight
  decay and the global gradient-norm clip (0: off)."""
  learning_rate: float
  min_learning_rate: float
  schedule: str
  warmup_steps: int
  b1: float
  b2: float
  eps: float
  weight_decay: float
  grad_clip_norm: float


OPTIMIZER_KEYS = section_keys(OptimizerSettings)


def read_optimizer_settings(section: ml_collections.ConfigDict) -> OptimizerSettings:
  """`section` (`config.optimizer`) as settings; raises ValueError naming a bad key."""
  check_keys(section, 'optimizer', OPTIMIZER_KEYS)
  check_positive(section, 'optimizer', 'learning_rate', 'eps')
  check_section_choice(section, 'optimizer', 'schedule', SCHEDULES)
  check_range('optimizer.min_learning_rate', section.min_learning_rate, at_least=0, below=section.learning_rate)
  if section.min_learning_rate and section.schedule != 'cosine':
    raise ValueError(f'optimizer.min_learning_rate={section.min_learning_rate} is where a cosine schedule ends; '
                     f'optimizer.schedule={section.schedule!r} would not read it (set 0)')
  for key in ('warmup_steps', 'weight_decay', 'grad_clip_norm'):
    check_range(f'optimizer.{key}', section[key], at_least=0)
  for key in ('b1', 'b2'):
    check_range(f'optimizer.{key}', section[key], at_least=0, below=1, why="Adam's moment decay")
  return OptimizerSettings(
      learning_rate=float(section.learning_rate), min_learning_rate=float(section.min_learning_rate),
      schedule=section.schedule, warmup_steps=int(section.warmup_steps),
      b1=float(section.b1), b2=float(section.b2), eps=float(section.eps), weight_decay=float(section.weight_decay),
      grad_clip_norm=float(section.grad_clip_norm))


def learning_rate_schedule(settings: OptimizerSettings, num_train_steps: int) -> optax.Schedule:
  """Linear warmup to `learning_rate`, then inverse square root (LRA, Vaswani), cosine to `min_learning_rate` at
  `num_train_steps`, or flat."""
  peak, warmup = settings.learning_rate, settings.warmup_steps

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    ramp = jnp.minimum(1.0, step / warmup) if warmup else 1.0
    if settings.schedule == 'rsqrt':
      decay = jnp.sqrt(max(warmup, 1) / jnp.maximum(step, max(warmup, 1)))
    elif settings.schedule == 'cosine':
      progress = jnp.clip((step - warmup) / max(num_train_steps - warmup, 1), 0.0, 1.0)
      floor = settings.min_learning_rate / peak
      decay = floor + (1.0 - floor) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
    else:
      decay = 1.0
    return peak * ramp * decay

  return schedule


def create_optimizer(settings: OptimizerSettings, num_train_steps: int) -> optax.GradientTransformation:
  """AdamW whose weight decay skips biases and normalisation scales (parameters with ndim < 2)."""
  adamw = optax.adamw(learning_rate_schedule(settings, num_train_steps), b1=settings.b1, b2=settings.b2,
                      eps=settings.eps, weight_decay=settings.weight_decay,
                      mask=lambda params: jax.tree.map(lambda p: p.ndim > 1, params))
  if settings.grad_clip_norm:
    return optax.chain(optax.clip_by_global_norm(settings.grad_clip_norm), adamw)
  return adamw


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
  optimizer = read_optimizer_settings(config.optimizer)
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
