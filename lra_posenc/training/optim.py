"""AdamW with warmup and a choice of decay, from `config.optimizer` read once into `OptimizerSettings`."""
import dataclasses

import jax
import jax.numpy as jnp
import ml_collections
import optax

from lra_posenc.training.config_checks import check_keys, section_keys
from lra_posenc.validation import check_positive, check_range, check_section_choice

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


KEYS = section_keys(OptimizerSettings)


def read_settings(section: ml_collections.ConfigDict) -> OptimizerSettings:
  """`section` (`config.optimizer`) as settings; raises ValueError naming a bad key."""
  check_keys(section, 'optimizer', KEYS)
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
