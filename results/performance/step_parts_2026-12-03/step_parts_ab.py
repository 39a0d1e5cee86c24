"""A/B in one process: the language model's `:cpu` train step (`benchmarking.TrainStepTimer`) with parts of it
switched off, to measure what each costs; 8 interleaved windows of 5 steps. Measurement only: a step without the
non-finite guard or the softmax's max subtraction is not one to train with. From the repository root:

    python results/performance/step_parts_2026-12-03/step_parts_ab.py lm1b|nanogpt OUTPUT.json

lm1b: ours in lm1b's form (scripts/side_by_side_lm.py's `our_config`, ReLU and biases); nanogpt: the trainer's form.
Variants: base; no_norms (the parameter and update norms zero; the gradient norm kept, as the guard reads it);
no_guard_norms (no select of the old state on a non-finite step, no norms); no_softmax_max (attention's softmax
as exp / sum, without subtracting the row's max).
"""
import functools, json, statistics, sys
import jax, jax.numpy as jnp, optax
from step_config import step_config
from lra_posenc import benchmarking
from lra_posenc.tasks import TASKS
from lra_posenc.training import provenance, steps
config = step_config(sys.argv[1], sys.argv[3:])


original_step = steps.train_step
original_softmax = jax.nn.softmax
original_norm = optax.tree.norm


def step_without(state, batch, rng, stop_requested, *, task, drop):
  if 'guard' in drop:
    rng = jax.random.fold_in(jax.random.fold_in(rng, state.step), jax.lax.axis_index(steps.AXIS))
    def loss_fn(params):
      metrics = task.metrics(params, batch, rng)
      return metrics['loss'] / steps.sum_over_devices(jax.lax.stop_gradient(metrics['count'])), metrics
    grads, metrics = steps.sum_over_devices(jax.grad(loss_fn, has_aux=True)(state.params))
    updates, opt_state = state.tx.update(grads, state.opt_state, state.params)
    state = state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates), opt_state=opt_state)
    z = jnp.zeros((), jnp.float32)
    return state, metrics, {'finite': jnp.bool_(True), 'stop': stop_requested, 'grad_norm': z, 'param_norm': z, 'update_norm': z}
  state, metrics, info = original_step(state, batch, rng, stop_requested, task=task)
  return state, metrics, info


def build(drop):
  steps.train_step = functools.partial(step_without, drop=drop)
  if 'norms' in drop:
    calls = []
    def norm(tree, *a, **k):
      calls.append(1)
      return original_norm(tree, *a, **k) if len(calls) % 3 == 1 else jnp.zeros((), jnp.float32)
    optax.tree.norm = norm
  if 'max' in drop:
    jax.nn.softmax = lambda x, axis=-1: (lambda e: e / e.sum(axis, keepdims=True))(jnp.exp(x))
  try:
    return benchmarking.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
  finally:
    steps.train_step, jax.nn.softmax, optax.tree.norm = original_step, original_softmax, original_norm


variants = {'base': (), 'no_norms': ('norms',), 'no_guard_norms': ('guard',), 'no_softmax_max': ('max',)}
timers = {name: build(drop) for name, drop in variants.items()}
seconds = benchmarking.interleaved_windows(timers, windows=8, steps_per_window=5)
ms = {name: 1e3 * statistics.median(s) / 5 for name, s in seconds.items()}
result = {'form': sys.argv[1], 'ms_per_step': ms, 'ratio_to_base': {k: v / ms['base'] for k, v in ms.items()},
          'first_step_loss': {k: t.first_step_loss for k, t in timers.items()}, 'cpu': provenance.host_cpu(),
          'windows_seconds': seconds}
print(json.dumps({k: result[k] for k in ('form', 'ms_per_step', 'ratio_to_base', 'first_step_loss')}, indent=1))
json.dump(result, open(sys.argv[2], 'w'), indent=1)
