"""AdamW with warmup and a choice of decay, from `config.optimizer`."""
import jax
import jax.numpy as jnp
import ml_collections
import optax

from lra_posenc.training.config_checks import check_keys
from lra_posenc.validation import check_positive, check_range, check_section_choice

KEYS = ('learning_rate', 'schedule', 'warmup_steps', 'b1', 'b2', 'eps', 'weight_decay', 'grad_clip_norm')
SCHEDULES = ('rsqrt', 'cosine', 'constant')


def check_config(config: ml_collections.ConfigDict) -> None:
  check_keys(config, 'optimizer', KEYS)
  check_positive(config, 'optimizer', 'learning_rate', 'eps')
  check_section_choice(config, 'optimizer', 'schedule', SCHEDULES)
  for key in ('warmup_steps', 'weight_decay', 'grad_clip_norm'):
    check_range(f'optimizer.{key}', config[key], at_least=0)
  for key in ('b1', 'b2'):
    check_range(f'optimizer.{key}', config[key], at_least=0, below=1, why="Adam's moment decay")


def learning_rate_schedule(config: ml_collections.ConfigDict, num_train_steps: int) -> optax.Schedule:
  """Linear warmup to `learning_rate`, then inverse square root (LRA, Vaswani), cosine to zero, or flat."""
  peak, warmup = config.learning_rate, config.warmup_steps

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    ramp = jnp.minimum(1.0, step / warmup) if warmup else 1.0
    if config.schedule == 'rsqrt':
      decay = jnp.sqrt(max(warmup, 1) / jnp.maximum(step, max(warmup, 1)))
    elif config.schedule == 'cosine':
      progress = jnp.clip((step - warmup) / max(num_train_steps - warmup, 1), 0.0, 1.0)
      decay = 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
    else:
      decay = 1.0
    return peak * ramp * decay

  return schedule


def create_optimizer(config: ml_collections.ConfigDict, num_train_steps: int) -> optax.GradientTransformation:
  """AdamW whose weight decay skips biases and normalisation scales (parameters with ndim < 2)."""
  adamw = optax.adamw(learning_rate_schedule(config, num_train_steps), b1=config.b1, b2=config.b2,
                      eps=config.eps, weight_decay=config.weight_decay,
                      mask=lambda params: jax.tree.map(lambda p: p.ndim > 1, params))
  if config.grad_clip_norm:
    return optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), adamw)
  return adamw
