"""Times variants of the trainer's train step, side by side with Flax wmt, at wmt default shape, dropout 0."""
import argparse, json, statistics, sys
import jax, jax.numpy as jnp, optax
sys.path.insert(0, '/work/main/scripts')
import side_by_side_wmt as sbs
from lra_posenc import benchmarking
from lra_posenc.training import steps, provenance
from lra_posenc.translation import train as translation_train

ORIGINAL = steps.train_step

def variant(select: bool, norms: str):
  def train_step(state, batch, rng, stop_requested, *, task):
    rng = jax.random.fold_in(jax.random.fold_in(rng, state.step), jax.lax.axis_index(steps.AXIS))
    def loss_fn(params):
      metrics = task.metrics(params, batch, rng)
      return metrics['loss'] / steps.sum_over_devices(jax.lax.stop_gradient(metrics['count'])), metrics
    grads, metrics = steps.sum_over_devices(jax.grad(loss_fn, has_aux=True)(state.params))
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(metrics['loss']) & jnp.isfinite(grad_norm)
    updates, opt_state = state.tx.update(grads, state.opt_state, state.params)
    updated = state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates), opt_state=opt_state)
    if select == 'cond':
      new = jax.lax.cond(finite, lambda: updated, lambda: state)
    else:
      new = jax.tree.map(lambda n, o: jnp.where(finite, n, o), updated, state) if select else updated
    zero = jnp.zeros((), jnp.float32)
    info = {'finite': finite, 'stop': stop_requested > 0, 'grad_norm': grad_norm,
            'param_norm': optax.tree.norm(new.params) if norms == 'all' else zero,
            'update_norm': jnp.where(finite, optax.tree.norm(updates), 0.0) if norms == 'all' else zero}
    return new, metrics, info
  return train_step

