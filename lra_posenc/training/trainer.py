"""The one train loop every task shares, and its steps: set up, restore, train with evaluations and checkpoints,
then test.

A task supplies a model's loss and metrics, its batches, its artifacts and its settings (`task.Task`). This module
holds, in order: the pmapped train and evaluation steps, pure functions of their arguments, and their compilation;
scoring parameters with the evaluation step (validation during training, the test splits after it); the loop's
view of the steps since the last log step and of stop requests, read without waiting; and the loop. Device
placement and processes are `distributed`'s, checkpoints and the run record `checkpointing`'s, the workdir's files
`run_files`'.
"""
import concurrent.futures
import contextlib
import dataclasses
import functools
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax.training import train_state

from lra_posenc import progress
from lra_posenc.training import checkpointing, distributed, run_files
from lra_posenc.training.batches import Batch
from lra_posenc.training.checkpointing import Checkpoints, RunRecord, RunSpan, check_resumable
from lra_posenc.training.distributed import (AXIS, StopSignals, device_batches, host_copy, local_devices_sharding,
                                             replicate, shard)
from lra_posenc.training.run_files import MetricWriter, provenance
from lra_posenc.training.settings import create_optimizer, learning_rate_schedule
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
  tx = create_optimizer(task.settings.optimizer, task.settings.training.num_train_steps)
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


def metric_averages(metric_sums: list[Metrics], keep_count: bool = False) -> dict[str, float]:
  """Averages per counted item (example, or target token for translation) from per-step (device-0) sums;
  with `keep_count`, the total count too."""
  totals = jax.tree.map(lambda *xs: float(np.sum(xs)), *jax.device_get(metric_sums))
  count = totals.pop('count')
  return {k: v / count for k, v in totals.items()} | ({'count': count} if keep_count else {})


def evaluate(p_eval_step: Callable, params: Params, batches: Iterable[Batch], what: str = 'evaluating'
             ) -> dict[str, float]:
  """Metric averages over `batches`, with progress (and an ETA where their number is known) under `what`.

  Each batch's sums are fetched before the next is counted, so progress is work done, not dispatched.
  """
  return metric_averages([host_copy(p_eval_step(params, shard(b)))
                          for b in progress.track(batches, what, unit='batches')])


def validation_scores(p_eval_step: Callable, replicated_params: Params, task: Task, what: str) -> dict[str, float]:
  """The validation split's metric averages and the task's further validation scores (BLEU)."""
  batches = task.eval_batches('validation')
  scores = evaluate(p_eval_step, replicated_params, batches, f'{what}: evaluating on validation')
  if task.score_validation:
    scores |= task.score_validation(replicated_params)
  return scores


def test_scores(p_eval_step: Callable, replicated_params: Params, task: Task, which: str, what: str
                ) -> dict[str, Any]:
  """Scores of `which` parameters ('best', 'averaged') on every test split; the first is the headline 'test'."""
  test_sets = {}
  for split in task.test_splits:
    test_sets[split] = evaluate(p_eval_step, replicated_params, task.eval_batches(split), f'{what}: testing on {split}')
    if task.score_test:
      test_sets[split] |= task.score_test(replicated_params, split, which)
  return {'test': test_sets[task.test_splits[0]], 'test_sets': test_sets}


def test_best(checkpoints: Checkpoints, template: Any, p_eval_step: Callable, task: Task) -> dict[str, Any]:
  """The best checkpoint's step, its validation scores (as recorded) and its test scores."""
  best_step, state, record = checkpoints.restore_best(template)
  return {'best_step': best_step, 'validation': record['best']['validation']} | test_scores(
      p_eval_step, replicate(state.params), task, 'best', f'best step {best_step}')


def test_average(checkpoints: Checkpoints, template: Params, p_eval_step: Callable, task: Task) -> dict[str, Any]:
  """Validation and test scores of the mean of the kept evaluated parameters (fairseq's average_checkpoints)."""
  steps, params = checkpoints.restore_evaluated(template)
  replicated = replicate(average_parameters(params))
  what = f'average of steps {steps[0]}-{steps[-1]}'
  return {'steps': steps, 'validation': validation_scores(p_eval_step, replicated, task, what)} | test_scores(
      p_eval_step, replicated, task, 'averaged', what)


def average_parameters(params: Sequence[Params]) -> Params:
  """The elementwise mean of parameter trees, summed in float64 and returned in each leaf's dtype."""
  return jax.tree.map(lambda *leaves: np.mean(np.stack(leaves).astype(np.float64), axis=0).astype(leaves[0].dtype),
                      *params)


class AgreedStop:
  """Whether any process asked to stop, read every `STOP_READ_EVERY` steps from the step sums of the read before.

  That step finished long ago, so the read does not make the host wait for the device, and every process
  reads the same step's flag: all stop after the same step, at most 2 * `STOP_READ_EVERY` steps after the
  request.
  """
  STOP_READ_EVERY = 5

  def __init__(self):
    self._pending: jax.Array | None = None

  def read(self, step: int, sums: StepSums) -> bool:
    if step % self.STOP_READ_EVERY:
      return False
    previous, self._pending = self._pending, sums['stop']
    return previous is not None and bool(host_copy(previous))


class StepWindow:
  """The steps since the last log step: their `StepSums` on the device, their time on the host.

  `sums` is the train step's carry; it is fetched only at log steps (`scores`) and before anything is
  written (`raise_if_non_finite`). Time spent in `excluded()` (evaluation, checkpoint writes) is not
  training time: the rates leave it out.
  """

  def __init__(self, step: int, zeros: StepSums):
    self._zeros = zeros  # Not donated by the train step, so one copy starts every window.
    self._restart(step)

  def _restart(self, step: int) -> None:
    self.sums, self._step = self._zeros, step
    self._start, self._excluded_seconds = time.perf_counter(), 0.0

  @contextlib.contextmanager
  def excluded(self) -> Iterator[None]:
    jax.block_until_ready(self.sums)  # The steps already queued count as training.
    start = time.perf_counter()
    try:
      yield
    finally:
      self._excluded_seconds += time.perf_counter() - start

  def raise_if_non_finite(self, step: int, checkpoints: Checkpoints) -> None:
    """Stops the run at the first non-finite step, before anything is logged or saved after it."""
    first = int(host_copy(self.sums['first_non_finite']))
    if first >= 0:
      latest = checkpoints.latest_step()
      kept, rerun = ((f'the latest checkpoint (step {latest}) and the best one are kept', 'resume from it')
                     if latest is not None else ('no checkpoint was saved before it', 'start again'))
      raise FloatingPointError(
          f'non-finite loss or gradients at step {self._step + first + 1}; stopped at step {step} without saving; '
          f'{kept}. Lower optimizer.learning_rate, set optimizer.grad_clip_norm or check the data, then re-run to '
          f'{rerun}')

  def scores(self, step: int, num_steps: int, learning_rate: Callable, count_unit: str) -> dict[str, float]:
    """Averages per counted item, the last step's norms and learning rate, the items counted per step
    (target tokens: fairseq's 'wpb'), rates over the training time (evaluation and checkpoint writes left
    out, and reported as 'excluded_seconds') and the ETA at the step budget; starts a new window."""
    sums = host_copy(self.sums)
    steps = step - self._step
    excluded = self._excluded_seconds
    steps_per_second = steps / (time.perf_counter() - self._start - excluded)
    averages = metric_averages([sums['metrics']], keep_count=True)
    per_step = averages.pop('count') / steps
    scores = averages | {name: float(sums[name]) for name in NORMS} | {
        'learning_rate': float(learning_rate(step - 1)), 'steps_per_second': steps_per_second,
        f'{count_unit}_per_step': per_step, f'{count_unit}_per_second': per_step * steps_per_second,
        'excluded_seconds': excluded, 'eta_minutes': (num_steps - step) / steps_per_second / 60}
    self._restart(step)
    return scores


def itstime(step: int, every: int, last: int) -> bool:
  """Whether a task done every `every` steps (and after the last) is due after `step`."""
  return step % every == 0 or step == last


def train_and_evaluate(workdir: str, task: Task, should_stop: Callable[[int], bool] | None = None
                       ) -> dict[str, Any]:
  """Trains `task` as its settings say, or resumes training in `workdir`, then scores the best checkpoint on the
  test split(s).

  Training ends after `training.num_train_steps`, or once `training.patience` evaluations
  in a row have not improved the selection metric (early stopping). It stops, after saving
  a checkpoint, on SIGTERM or SIGINT to any process while training, or when `should_stop(step)` (a
  function of the step alone, so every host agrees) says so; re-running the same call
  resumes. Returns `status` ('finished' or 'stopped'), `step` and `training_ended` (why and
  at which step), and when finished the results also written to results.json, with every
  run's span and training time (`runs`); with `average_last` N, the mean of the
  parameters of the last N evaluations is scored beside the best checkpoint ('averaged').
  Re-running a finished workdir returns its results.json as it is; training it further (more steps or
  patience) first sets that file aside, as results.step_STEP.json, and a changed config.json as
  config.step_STEP.json.
  """
  # Workdir: every process checks, so a host that cannot write fails the run now.
  distributed.check_everywhere(lambda: run_files.prepare_workdir(workdir), f'writing to workdir {workdir!r}')
  settings = task.settings
  num_steps, patience = settings.training.num_train_steps, settings.training.patience

  # Model, optimizer and PRNG keys.
  init_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(settings.seed))
  state = create_state(task, init_rng)
  logging.info('parameters: %d', sum(x.size for x in jax.tree.leaves(state.params)))
  attention_paths = {name: dataclasses.asdict(path) for name, path in task.attention_paths.items()}
  for name, path in attention_paths.items():
    logging.info('%s: %s%s', name, path['implementation'], f" ({path['reason']})" if path['reason'] else '')
  distributed.check_everywhere(
      lambda: run_files.check_free_space(workdir, state, settings.checkpoint.max_to_keep,
                                             settings.evaluation.average_last, checkpointing.bytes_held(workdir)),
      'checking free space in the workdir')
  record = RunRecord(rng=np.asarray(dropout_rng).tolist(), model=settings.model_record, artifacts=task.artifacts)
  p_train_step, p_eval_step = pmapped_steps(task)

  with (Checkpoints(workdir, max_to_keep=settings.checkpoint.max_to_keep,
                    evaluated_to_keep=settings.evaluation.average_last) as checkpoints,
        StopSignals() as signals, contextlib.ExitStack() as stack):
    # Restore.
    restored = checkpoints.restore_newest_readable(state, check=functools.partial(
        check_resumable, record, settings.evaluation.selection_metric))
    if restored:
      state, record = restored[0], RunRecord.from_json(restored[1])
      logging.info('resumed from step %d', int(state.step))
    step = first_step = int(state.step)
    results_path = os.path.join(workdir, run_files.RESULTS_FILE)
    done = step >= num_steps or record.out_of_patience(patience)
    if done and distributed.gather_flags(os.path.exists(results_path))[0]:  # Process 0's view.
      logging.info('%s already finished training at step %d; its results.json is kept (more steps: raise '
                   'training.num_train_steps or training.patience; a new run: a new --workdir)', workdir, step)
      return (run_files.read_json(results_path) if os.path.exists(results_path)
              else {'status': 'finished', 'step': step})
    distributed.on_primary(functools.partial(run_files.write_run_files, workdir, settings.config_record,
                                             task.artifacts, step),
                           'writing config.json and artifacts.json')
    writer = stack.enter_context(MetricWriter(workdir, resume_step=step))

    # Compile.
    replicated = distributed.replicate(state)
    rng = distributed.replicate(jnp.asarray(record.rng, jnp.uint32))
    batches = distributed.device_batches(task.train_batches(step), size=2)
    learning_rate = learning_rate_schedule(settings.optimizer, num_steps)
    requests = {requested: distributed.stop_requests(requested) for requested in (False, True)}
    run_start = time.perf_counter()
    first_batch = next(batches)
    batches = itertools.chain([first_batch], batches)
    sums = zero_sums(task, replicated, first_batch, rng, requests[False])
    compile_seconds = 0.0 if done else compile_train_steps(  # Done: cut short while testing; test only.
        p_train_step, replicated, sums, rng, requests[False], task.train_batch_shapes)
    window = StepWindow(step, sums)
    agreed_stop = AgreedStop()

    def saved(record: RunRecord, step: int) -> dict[str, Any]:
      """`record` with this run's span, training and compile time so far, as every checkpoint saves it."""
      return record.with_run(RunSpan(first_step, step, time.perf_counter() - run_start, compile_seconds)).to_json()

    # Train.
    while not done:
      replicated, window.sums = p_train_step(replicated, window.sums, next(batches), rng,
                                             requests[signals.requested()])
      step += 1
      signalled = agreed_stop.read(step, window.sums)
      stop = signalled or bool(should_stop and should_stop(step))
      if itstime(step, settings.training.log_every_steps, num_steps):
        window.raise_if_non_finite(step, checkpoints)
        writer.write(step, window.scores(step, num_steps, learning_rate, task.count_unit), prefix='train')
      if itstime(step, settings.evaluation.every_steps, num_steps):
        window.raise_if_non_finite(step, checkpoints)
        with window.excluded():
          record = _evaluate_and_select(step, replicated, record, p_eval_step, task, writer, checkpoints, saved)
        if record.out_of_patience(patience):
          logging.info('step %d: %d evaluations without improving on the validation %s of step %d; stopping early',
                       step, patience, settings.evaluation.selection_metric, record.best.step)
      done = step == num_steps or record.out_of_patience(patience)
      if itstime(step, settings.checkpoint.every_steps, num_steps) or stop or done:
        window.raise_if_non_finite(step, checkpoints)
        with window.excluded():
          checkpoints.save_latest(step, distributed.host_copy(replicated), saved(record, step))
      if stop and not done:
        logging.warning('stopped at step %d; re-run the same command to resume', step)
        return {'status': 'stopped', 'step': step,
                'training_ended': {'reason': 'signal' if signalled else 'stop_request', 'step': step}}
    # A request too late for the agreed reads (the last steps) stops the run before its testing, which can
    # take minutes that a preempted host does not have: the last step's checkpoint is saved, and a re-run tests.
    signalled = bool(distributed.gather_flags(signals.requested()).any())
    signals.close()  # Nothing polls a request from here on: a signal acts as it would without the trainer.
    if signalled:
      logging.warning('stopped at step %d, as training ended, before testing; re-run the same command to test', step)
      return {'status': 'stopped', 'step': step, 'training_ended': {'reason': 'signal', 'step': step}}
    runs = saved(record, step)['runs']
    ended = {'reason': 'patience' if record.out_of_patience(patience) else 'num_train_steps', 'step': step}

    # Test the best checkpoint, and the average of the last evaluated ones.
    results = test_best(checkpoints, state, p_eval_step, task)
    if settings.evaluation.average_last:
      results['averaged'] = test_average(checkpoints, state.params, p_eval_step, task)
    results |= {'status': 'finished', 'step': step, 'training_ended': ended, 'config': settings.config_record,
                'baselines': task.baselines, **({'data': task.data_report} if task.data_report else {}),
                'train_seconds_this_run': runs[-1]['train_seconds'], 'steps_this_run': step - first_step,
                'train_seconds_total': sum(run['train_seconds'] for run in runs), 'runs': runs,
                'attention': attention_paths, 'provenance': provenance()}
    if distributed.is_primary():
      run_files.write_json(results_path, results)
    writer.write(step, {f'test_{k}': v for k, v in results['test'].items() if isinstance(v, (int, float))},
                 prefix='final')
  return results


def _evaluate_and_select(step: int, replicated: Any, record: RunRecord, p_eval_step: Callable, task: Task,
                         writer: MetricWriter, checkpoints: Checkpoints,
                         saved: Callable[[RunRecord, int], dict[str, Any]]) -> RunRecord:
  """Scores the validation split at `step`, logs it, and saves the parameters as the best checkpoint when they
  are, and among the evaluated ones when the last evaluations are averaged. Returns the updated record."""
  keep_evaluated = bool(task.settings.evaluation.average_last)
  scores = validation_scores(p_eval_step, replicated.params, task, f'step {step}')
  writer.write(step, scores, prefix='validation')
  record = record.after_evaluation(step, scores, task.settings.evaluation.selection_metric)
  improved = record.best.step == step
  if improved or keep_evaluated:
    host_state = distributed.host_copy(replicated)
    if improved:
      checkpoints.save_best(step, host_state, saved(record, step))
    if keep_evaluated:
      checkpoints.save_evaluated(step, host_state.params)
  return record
