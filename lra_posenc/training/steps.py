"""The pmapped train and evaluation steps, pure functions of their arguments, and their compilation."""
import concurrent.futures
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax.training import train_state

from lra_posenc.training import optim
from lra_posenc.training.batches import Batch
from lra_posenc.training.placement import AXIS, device_batches, local_devices_sharding
from lra_posenc.training.task import Metrics, Params, Task

# Per-step values every device of every host holds alike: 'finite' and 'stop' (booleans), and the
# global L2 norms 'grad_norm', 'param_norm' and 'update_norm'.
StepInfo = dict[str, jax.Array]
# What the loop's train step carries on the device from one log step to the next, so that nothing is
# fetched in between: the metric sums, the steps taken, the index (among them) of the first non-finite
# one (-1: none), whether a stop was requested, and the last step's norms.
StepSums = dict[str, Any]
NORMS = ('grad_norm', 'param_norm', 'update_norm')


def create_state(task: Task, init_rng: jax.Array) -> train_state.TrainState:
  """Freshly initialised parameters and the optimizer the task's settings describe, on one device."""
  tx = optim.create_optimizer(task.settings.optimizer, task.settings.training.num_train_steps)
  return train_state.TrainState.create(apply_fn=None, params=jax.jit(task.init_params)(init_rng), tx=tx)


def sum_over_devices(tree: Any) -> Any:
  """`tree` summed over the `AXIS` devices: a psum, skipped where the axis is one device (a single-device
  run; the axis spans every process's devices), for which XLA:CPU would still copy every leaf (the
  gradients: 5% of the translation step of PERFORMANCE.md's side-by-side)."""
  return tree if jax.lax.axis_size(AXIS) == 1 else jax.lax.psum(tree, AXIS)


def train_step(state: train_state.TrainState, batch: Batch, rng: jax.Array, stop_requested: jax.Array, *,
               task: Task) -> tuple[train_state.TrainState, Metrics, StepInfo]:
  """One optimizer step on the global batch, split across the `AXIS` devices of every host.

  The loss is the mean over the global batch's `count` (examples for ListOps, real
  target tokens for translation), whatever its length. Returns the new state, the
  metric sums and what every host reads alike: whether loss and gradients were finite
  (a non-finite step leaves the state as it was; the host loop then stops the run),
  whether any host asked to stop (`stop_requested`, a signal it received), and the
  norms of gradient, parameters and update, which tell encodings of different scales apart.
  """
  rng = jax.random.fold_in(jax.random.fold_in(rng, state.step), jax.lax.axis_index(AXIS))

  def loss_fn(params):
    metrics = task.metrics(params, batch, rng)
    return metrics['loss'] / sum_over_devices(jax.lax.stop_gradient(metrics['count'])), metrics

  grads, metrics = sum_over_devices(jax.grad(loss_fn, has_aux=True)(state.params))
  grad_norm = optax.tree.norm(grads)
  # One reduction tells both: a NaN or infinite gradient makes the norm so, as does a finite one whose
  # norm overflows float32 (entries above ~1e19), which this guard treats alike, even with clipping on.
  finite = jnp.isfinite(metrics['loss']) & jnp.isfinite(grad_norm)
  updates, opt_state = state.tx.update(grads, state.opt_state, state.params)
  updated = state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates), opt_state=opt_state)
  # A non-finite step leaves the state as it was. A select, not a lax.cond: XLA:GPU copies a conditional's
  # predicate to the host and waits for it, draining the queue of kernels every step.
  state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), updated, state)
  info = {'finite': finite, 'stop': sum_over_devices(stop_requested.astype(jnp.int32)) > 0,
          'grad_norm': grad_norm, 'param_norm': optax.tree.norm(state.params),
          'update_norm': jnp.where(finite, optax.tree.norm(updates), 0.0)}
  return state, metrics, info


def accumulating_train_step(state: train_state.TrainState, sums: StepSums, batch: Batch, rng: jax.Array,
                            stop_requested: jax.Array, *, task: Task) -> tuple[train_state.TrainState, StepSums]:
  """`train_step`, its metrics and flags added to `sums` (as `zero_sums` starts them) on the device."""
  state, metrics, info = train_step(state, batch, rng, stop_requested, task=task)
  first_non_finite = jnp.where((sums['first_non_finite'] < 0) & ~info['finite'], sums['steps'],
                               sums['first_non_finite'])
  return state, {'metrics': jax.tree.map(jnp.add, sums['metrics'], metrics), 'steps': sums['steps'] + 1,
                 'first_non_finite': first_non_finite, 'stop': sums['stop'] | info['stop'],
                 **{name: info[name] for name in NORMS}}


def zero_sums(task: Task, state: train_state.TrainState, batch: Batch, rng: jax.Array, stop_requested: jax.Array
              ) -> StepSums:
  """`StepSums` with nothing added yet, on the local devices as the train step places them.

  The arguments, placed as the loop's, give only shapes: one device's `task.metrics` is traced (the forward
  pass alone: a trace of the whole step cost 3-6 s at the LRA shape on 2 CPU cores), not run.
  """
  one_device = lambda tree: jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), tree)
  metrics = jax.eval_shape(task.metrics, one_device(state.params), one_device(batch), one_device(rng))
  per_device = lambda value, dtype: np.full(stop_requested.shape, value, dtype)
  sums = {'metrics': jax.tree.map(lambda s: np.zeros(stop_requested.shape + s.shape, s.dtype), metrics),
          'steps': per_device(0, np.int32), 'first_non_finite': per_device(-1, np.int32),
          'stop': per_device(False, bool), **{name: per_device(0, np.float32) for name in NORMS}}
  return jax.device_put(sums, local_devices_sharding())


def eval_step(params: Params, batch: Batch, *, task: Task) -> Metrics:
  return sum_over_devices(task.metrics(params, batch, None))


def donated_arguments(platform: str) -> tuple[int, ...]:
  """The train step's arguments it donates on `platform`: the state on an accelerator, whose memory it holds
  once instead of twice; nothing on a CPU. There XLA copies every donated leaf when the step starts (the
  parameters and both Adam moments: 108 copies in the language model's `:cpu` step, 395 in translation's), which
  cost more time than fresh output buffers do and saved 4 MB of the former's 67 (PERFORMANCE.md)."""
  return () if platform == 'cpu' else (0,)


def pmapped_steps(task: Task) -> tuple[Callable, Callable]:
  """`accumulating_train_step` (donating the state where `donated_arguments` says) and `eval_step` over the
  local devices: the trainer's and benchmark's."""
  p_train_step = jax.pmap(functools.partial(accumulating_train_step, task=task), axis_name=AXIS,
                          donate_argnums=donated_arguments(jax.local_devices()[0].platform))
  p_eval_step = jax.pmap(functools.partial(eval_step, task=task), axis_name=AXIS)
  return p_train_step, p_eval_step


def compile_train_steps(p_train_step: Callable, replicated: train_state.TrainState, sums: StepSums, rng: jax.Array,
                        stop_requested: jax.Array, batch_shapes: Sequence[dict[str, jax.ShapeDtypeStruct]]) -> float:
  """Compiles `p_train_step` for each of this host's batch shapes, all at once, before training.

  Otherwise each length bucket's first batch holds training up for its own compile, one after another
  (six of 10-13 s each at `:tiny` on 2 CPU cores). Traced one by one, compiled in threads (XLA releases
  the GIL); the loop's calls then find each program in jax's caches, as arguments placed alike
  (`replicate`, `device_batches`) do. Returns the seconds it took.
  """
  if not batch_shapes:
    return 0.0
  start = time.perf_counter()
  zeros = [{k: np.zeros(s.shape, s.dtype) for k, s in shapes.items()} for shapes in batch_shapes]
  lowered = [p_train_step.lower(replicated, sums, batch, rng, stop_requested)
             for batch in device_batches(zeros, size=1)]
  with concurrent.futures.ThreadPoolExecutor(len(lowered)) as pool:
    list(pool.map(lambda program: program.compile(), lowered))
  seconds = time.perf_counter() - start
  logging.info('compiled the train step for %d batch shape(s) in %.1f s', len(lowered), seconds)
  return seconds
