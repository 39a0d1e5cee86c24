"""The one train loop both tasks share: pmapped steps, evaluation, checkpoints, resume.

A task supplies a model's loss and metrics, its batches and its artifacts (`Task`);
everything else (devices, PRNG, optimizer, checkpointing, logging, results) is here.
"""
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import itertools
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging
from flax.training import train_state

from lra_posenc import progress
from lra_posenc.training import distributed, optim
from lra_posenc.training.batches import Batch
from lra_posenc.training.checkpointing import Checkpoints
from lra_posenc.training.config_checks import check_keys, upgrade_old_model
from lra_posenc.training.metric_writer import MetricWriter
from lra_posenc.training.provenance import provenance
from lra_posenc.training.stop_signals import StopSignals
from lra_posenc.validation import check_positive, check_range

AXIS = 'batch'
TOP_LEVEL_KEYS = ('seed', 'data', 'model', 'optimizer', 'training', 'evaluation', 'checkpoint')
TRAINING_KEYS = ('batch_size', 'num_train_steps', 'log_every_steps', 'patience')
EVALUATION_KEYS = ('batch_size', 'every_steps', 'selection_metric', 'average_last')  # The task checks selection_metric.
CHECKPOINT_KEYS = ('every_steps', 'max_to_keep')
# Model keys that say how the model is computed, not what it computes: a run may resume with them
# changed (on a GPU, with rematerialisation), so checkpoints do not record them.
HOW_THE_MODEL_COMPUTES = ('attention_implementation', 'remat', 'length_multiple')

Params = Any
Metrics = dict[str, jax.Array]
# Per-step values every device of every host holds alike: 'finite' and 'stop' (booleans), and the
# global L2 norms 'grad_norm', 'param_norm' and 'update_norm'.
StepInfo = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class Task:
  """What the trainer needs from a task.

  Attributes:
    init_params: rng -> model parameters.
    metrics: (params, batch, dropout rng or None for evaluation) -> metric sums over the
      batch's examples, weighted by batch['weight']; must include 'loss' (the summed
      training loss) and 'count' (the summed weight).
    train_batches: global batch index -> endless iterator of this host's training batches.
    eval_batches: split name -> this host's batches of that split, padded with zero weight.
    selection_metric: validation metric (higher is better) that picks the best checkpoint: one
      of `metrics`' or of `score_validation`'s.
    artifacts: JSON data a checkpoint is only valid with (a vocabulary): saved with every
      checkpoint, and a resume with different artifacts is refused.
    baselines: reference scores reported beside the results (majority-class accuracy).
    test_splits: the splits the best checkpoint is scored on; the first is the headline
      'test' result, all of them are under 'test_sets'.
    score_test: (params replicated over local devices, split, which: 'best' or 'averaged') -> further
      test scores (BLEU of decoded output), or None.
    score_validation: (params, replicated over local devices) -> further validation scores
      (BLEU of greedy decoding) added to every evaluation's, or None.
    attention_paths: how each of the model's attention calls computes in training (name ->
      a dataclass with `implementation` and `reason`); logged once, written to results.json.
    count_unit: what `metrics`' 'count' counts ('examples'; 'target_tokens' for translation), logged
      per step and per second.
    train_batch_shapes: the shapes of `train_batches`' batches (one per length bucket): the train step is
      compiled for all of them, concurrently, before the first step. A shape not named compiles when its
      first batch comes.

  A task's factory validates the whole config (with `check_config` for the trainer's
  sections) before it reads any data, so the trainer does not check it again.
  """
  init_params: Callable[[jax.Array], Params]
  metrics: Callable[[Params, Batch, jax.Array | None], Metrics]
  train_batches: Callable[[int], Iterator[Batch]]
  eval_batches: Callable[[str], Iterable[Batch]]
  selection_metric: str
  artifacts: dict[str, Any]
  baselines: dict[str, float]
  test_splits: tuple[str, ...] = ('test',)
  score_test: Callable[[Params, str, str], dict[str, Any]] | None = None
  score_validation: Callable[[Params], dict[str, float]] | None = None
  attention_paths: dict[str, Any] = dataclasses.field(default_factory=dict)
  count_unit: str = 'examples'
  train_batch_shapes: tuple[dict[str, jax.ShapeDtypeStruct], ...] = ()


def check_config(config: ml_collections.ConfigDict, task_sections: Sequence[str] = (),
                 task_training_keys: Sequence[str] = ()) -> None:
  """Validates the sections the trainer reads; tasks check `data`, `model`, `task_sections` and their
  own `training` keys (`task_training_keys`)."""
  check_keys(config, 'config', TOP_LEVEL_KEYS + tuple(task_sections))
  check_keys(config.training, 'training', TRAINING_KEYS + tuple(task_training_keys))
  check_keys(config.evaluation, 'evaluation', EVALUATION_KEYS)
  check_keys(config.checkpoint, 'checkpoint', CHECKPOINT_KEYS)
  check_positive(config.training, 'training', 'batch_size', 'num_train_steps', 'log_every_steps')
  check_positive(config.evaluation, 'evaluation', 'batch_size', 'every_steps')
  for key in ('training.patience', 'evaluation.average_last'):  # 0: off.
    section, name = key.split('.')
    check_range(key, config[section][name], at_least=0)
  check_positive(config.checkpoint, 'checkpoint', *CHECKPOINT_KEYS)
  optim.check_config(config.optimizer)
  for path, size in (('training.batch_size', config.training.batch_size),
                     ('evaluation.batch_size', config.evaluation.batch_size)):
    if size % jax.device_count():
      raise ValueError(f'{path}={size} is not divisible by the {jax.device_count()} devices '
                       f'({jax.process_count()} process(es) x {jax.local_device_count()} local devices)')


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


# What the loop's train step carries on the device from one log step to the next, so that nothing is
# fetched in between: the metric sums, the steps taken, the index (among them) of the first non-finite
# one (-1: none), whether a stop was requested, and the last step's norms.
StepSums = dict[str, Any]
NORMS = ('grad_norm', 'param_norm', 'update_norm')


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
  return jax.device_put(sums, _local_devices_sharding())


def eval_step(params: Params, batch: Batch, *, task: Task) -> Metrics:
  return sum_over_devices(task.metrics(params, batch, None))


def sum_over_devices(tree: Any) -> Any:
  """`tree` summed over the `AXIS` devices: a psum, skipped where the axis is one device (a single-device
  run; the axis spans every process's devices), for which XLA:CPU would still copy every leaf (the
  gradients: 5% of the translation step of RESULTS.md's side-by-side)."""
  return tree if jax.lax.axis_size(AXIS) == 1 else jax.lax.psum(tree, AXIS)


def pmapped_steps(task: Task) -> tuple[Callable, Callable]:
  """`accumulating_train_step` (donating the state) and `eval_step` over the local devices: the trainer's and
  benchmark's."""
  p_train_step = jax.pmap(functools.partial(accumulating_train_step, task=task), axis_name=AXIS, donate_argnums=0)
  p_eval_step = jax.pmap(functools.partial(eval_step, task=task), axis_name=AXIS)
  return p_train_step, p_eval_step


def _local_devices_sharding() -> jax.sharding.NamedSharding:
  """Where the pmapped steps put their outputs: leading axis split over the local devices, a mesh of axis `AXIS`."""
  mesh = jax.sharding.Mesh(np.array(jax.local_devices()), (AXIS,))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))


def replicate(tree: Any) -> Any:
  """`tree` copied to every local device, placed as the pmapped steps place their outputs.

  A step's program is cached by its arguments' placement too: fed flax's `replicate` (another mesh) first
  and its own output state after, the train step compiled twice for one shape.
  """
  sharding, devices = _local_devices_sharding(), jax.local_device_count()
  return jax.tree.map(lambda x: jax.device_put(np.broadcast_to(np.asarray(x), (devices,) + np.shape(x)), sharding),
                      tree)


def device_batches(host_batches: Iterable[Batch], size: int) -> Iterator[Batch]:
  """Host batches split over the local devices (`shard`) and put there `size` ahead, placed as `replicate`.

  On a CPU they stay NumPy arrays, which the pmapped step takes in 20 us where `jax.device_put` costs 150 us
  of a host thread that the step's own threads compete with (the pipeline gap of RESULTS.md, Performance).
  """
  if jax.default_backend() == 'cpu':
    yield from map(shard, host_batches)
    return
  sharding = _local_devices_sharding()
  to_devices = lambda batch: jax.device_put(shard(batch), sharding)  # One call for every leaf: less host time.
  host_batches = iter(host_batches)
  queue = collections.deque(map(to_devices, itertools.islice(host_batches, size)))
  while queue:
    yield queue.popleft()
    queue.extend(map(to_devices, itertools.islice(host_batches, 1)))


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


def stop_requests(requested: bool) -> jax.Array:
  """The pmapped train step's `stop_requested`, already on the local devices (no transfer per step)."""
  return replicate(jnp.asarray(requested))


def create_state(config: ml_collections.ConfigDict, task: Task, init_rng: jax.Array) -> train_state.TrainState:
  """Freshly initialised parameters and the optimizer `config.optimizer` describes, on one device."""
  tx = optim.create_optimizer(config.optimizer, config.training.num_train_steps)
  return train_state.TrainState.create(apply_fn=None, params=jax.jit(task.init_params)(init_rng), tx=tx)


def shard(batch: Batch) -> Batch:
  """[host_batch, ...] -> [local_devices, host_batch / local_devices, ...]."""
  return jax.tree.map(lambda x: x.reshape((jax.local_device_count(), -1) + x.shape[1:]), batch)


def summarize(metric_sums: list[Metrics], keep_count: bool = False) -> dict[str, float]:
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
  return summarize([jax.device_get(flax.jax_utils.unreplicate(p_eval_step(params, shard(b))))
                    for b in progress.track(batches, what, unit='batches')])


def prepare_workdir(workdir: str) -> None:
  """Creates `workdir` and writes to it, so an unusable one fails now, naming itself, not hours later."""
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, f'.write_probe_{socket.gethostname()}_{os.getpid()}')
    with open(probe, 'w') as f:
      f.write('ok')
    os.remove(probe)
  except OSError as error:
    raise OSError(f'workdir {workdir!r} is not writable: {error}') from None


def check_free_space(workdir: str, state: train_state.TrainState, max_to_keep: int) -> None:
  """Fails unless the disk holds the kept checkpoints, the best one and one being written."""
  needed = (max_to_keep + 2) * sum(jnp.asarray(x).nbytes for x in jax.tree.leaves(state))
  free = shutil.disk_usage(workdir).free
  if free < needed:
    raise OSError(f'workdir {workdir!r} has {free / 2**20:.1f} MiB free, but {max_to_keep} latest checkpoints, '
                  f'the best one and one being written need about {needed / 2**20:.1f} MiB')


def itstime(step: int, every: int, last: int) -> bool:
  """Whether a task done every `every` steps (and after the last) is due after `step`."""
  return step % every == 0 or step == last


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, task: Task,
                       should_stop: Callable[[int], bool] | None = None) -> dict[str, Any]:
  """Trains, or resumes training in `workdir`, then scores the best checkpoint on the test split(s).

  Training ends after `training.num_train_steps`, or once `training.patience` evaluations
  in a row have not improved the selection metric (early stopping). It stops, after saving
  a checkpoint, on SIGTERM or SIGINT to any process, or when `should_stop(step)` (a
  function of the step alone, so every host agrees) says so; re-running the same call
  resumes. Returns `status` ('finished' or 'stopped'), `step` and `training_ended` (why and
  at which step), and when finished the results also written to results.json, with every
  run's span and training time (`runs`); with `evaluation.average_last` N, the mean of the
  parameters of the last N evaluations is scored beside the best checkpoint ('averaged').
  Re-running a finished workdir returns its results.json as it is, and writes nothing.
  """
  # Workdir: every process checks, so a host that cannot write fails the run now.
  distributed.check_everywhere(lambda: prepare_workdir(workdir), f'writing to workdir {workdir!r}')
  num_steps, patience = config.training.num_train_steps, config.training.patience

  # Model, optimizer and PRNG keys.
  init_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  state = create_state(config, task, init_rng)
  logging.info('parameters: %d', sum(x.size for x in jax.tree.leaves(state.params)))
  attention_paths = {name: dataclasses.asdict(path) for name, path in task.attention_paths.items()}
  for name, path in attention_paths.items():
    logging.info('%s: %s%s', name, path['implementation'], f" ({path['reason']})" if path['reason'] else '')
  distributed.check_everywhere(lambda: check_free_space(workdir, state, config.checkpoint.max_to_keep),
                               'checking free space in the workdir')
  model = {k: v for k, v in config.model.to_dict().items() if k not in HOW_THE_MODEL_COMPUTES}
  # 'evaluations_since_best' counts the evaluations that did not improve on the best one (early stopping).
  record = {'rng': np.asarray(dropout_rng).tolist(), 'best': None, 'evaluations_since_best': 0, 'model': model,
            'artifacts': task.artifacts}
  p_train_step, p_eval_step = pmapped_steps(task)

  def out_of_patience(record: dict) -> bool:  # Read from the record, so a resumed run agrees, as does every host.
    return bool(patience) and record.get('evaluations_since_best', 0) >= patience

  with (Checkpoints(workdir, max_to_keep=config.checkpoint.max_to_keep,
                    evaluated_to_keep=config.evaluation.average_last) as checkpoints,
        StopSignals() as signals, contextlib.ExitStack() as stack):
    # Restore.
    restored = checkpoints.restore_newest_readable(state, check=functools.partial(_check_compatible, record))
    if restored:
      state, record = restored
      logging.info('resumed from step %d', int(state.step))
    step = first_step = int(state.step)
    results_path = os.path.join(workdir, 'results.json')
    done = step >= num_steps or out_of_patience(record)
    if done and distributed.gather_flags(os.path.exists(results_path))[0]:  # Process 0's view.
      logging.info('%s already finished training at step %d; its results.json is kept (more steps: raise '
                   'training.num_train_steps or training.patience; a new run: a new --workdir)', workdir, step)
      return _read_json(results_path) if os.path.exists(results_path) else {'status': 'finished', 'step': step}
    distributed.on_primary(functools.partial(_write_run_files, workdir, config, task.artifacts),
                           'writing config.json and artifacts.json')
    writer = stack.enter_context(MetricWriter(workdir, resume_step=step))

    # Train.
    replicated = replicate(state)
    rng = replicate(jnp.asarray(record['rng'], jnp.uint32))
    batches = device_batches(task.train_batches(step), size=2)
    learning_rate = optim.learning_rate_schedule(config.optimizer, num_steps)
    requests = {requested: stop_requests(requested) for requested in (False, True)}
    earlier_runs = record.get('runs', [])  # Checkpoints written before runs were recorded have none.
    run_start = time.perf_counter()
    first_batch = next(batches)
    batches = itertools.chain([first_batch], batches)
    sums = zero_sums(task, replicated, first_batch, rng, requests[False])
    compile_seconds = compile_train_steps(p_train_step, replicated, sums, rng, requests[False],
                                          task.train_batch_shapes)
    window = _Window(step, sums)
    agreed_stop = _AgreedStop()

    def with_this_run(record: dict, step: int) -> dict:
      """`record` with this run's span, training and compile time so far, as every checkpoint saves it."""
      this_run = {'first_step': first_step, 'last_step': step, 'train_seconds': time.perf_counter() - run_start,
                  'compile_seconds': compile_seconds}
      return record | {'runs': earlier_runs + [this_run]}

    while not done:
      replicated, window.sums = p_train_step(replicated, window.sums, next(batches), rng,
                                             requests[signals.requested()])
      step += 1
      signalled = agreed_stop.read(step, window.sums)
      stop = signalled or bool(should_stop and should_stop(step))
      if itstime(step, config.training.log_every_steps, num_steps):
        window.raise_if_non_finite(step, checkpoints)
        writer.write(step, window.scores(step, num_steps, learning_rate, task.count_unit), prefix='train')
      if itstime(step, config.evaluation.every_steps, num_steps):
        window.raise_if_non_finite(step, checkpoints)
        with window.excluded():
          scores = evaluate(p_eval_step, replicated.params, task.eval_batches('validation'),
                            f'step {step}: evaluating on validation')
          if task.score_validation:
            scores |= task.score_validation(replicated.params)
          writer.write(step, scores, prefix='validation')
          if record['best'] is None or scores[task.selection_metric] > record['best']['score']:
            record = record | {'best': {'step': step, 'score': scores[task.selection_metric], 'validation': scores},
                               'evaluations_since_best': 0}
            checkpoints.save_best(step, _host_state(replicated), with_this_run(record, step))
          else:
            record = record | {'evaluations_since_best': record.get('evaluations_since_best', 0) + 1}
          if config.evaluation.average_last:
            checkpoints.save_evaluated(step, _host_state(replicated).params)
        if out_of_patience(record):
          logging.info('step %d: %d evaluations without improving on the validation %s of step %d; stopping early',
                       step, patience, task.selection_metric, record['best']['step'])
      done = step == num_steps or out_of_patience(record)
      if itstime(step, config.checkpoint.every_steps, num_steps) or stop or done:
        window.raise_if_non_finite(step, checkpoints)
        with window.excluded():
          checkpoints.save_latest(step, _host_state(replicated), with_this_run(record, step))
      if stop and not done:
        logging.warning('stopped at step %d; re-run the same command to resume', step)
        return {'status': 'stopped', 'step': step,
                'training_ended': {'reason': 'signal' if signalled else 'stop_request', 'step': step}}
    runs = with_this_run(record, step)['runs']
    ended = {'reason': 'patience' if out_of_patience(record) else 'num_train_steps', 'step': step}

    # Score the best checkpoint, and the average of the last evaluated ones.
    results = _test_best(checkpoints, state, p_eval_step, task)
    if config.evaluation.average_last:
      results['averaged'] = _test_average(checkpoints, state.params, p_eval_step, task)
    results |= {'status': 'finished', 'step': step, 'training_ended': ended, 'config': config.to_dict(),
                'baselines': task.baselines,
                'train_seconds_this_run': runs[-1]['train_seconds'], 'steps_this_run': step - first_step,
                'train_seconds_total': sum(run['train_seconds'] for run in runs), 'runs': runs,
                'attention': attention_paths, 'provenance': provenance()}
    if distributed.is_primary():
      write_json(results_path, results)
    writer.write(step, {f'test_{k}': v for k, v in results['test'].items() if isinstance(v, (int, float))},
                 prefix='final')
  return results


def _first_device(tree: Any) -> Any:
  """The first local device's values of pmapped outputs, fetched (every device holds the same); indexed on the
  host, as indexing a device array would dispatch a computation per leaf."""
  return jax.tree.map(lambda x: np.asarray(x.addressable_shards[0].data)[0], tree)


class _AgreedStop:
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
    return previous is not None and bool(_first_device(previous))


class _Window:
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
    first = int(_first_device(self.sums['first_non_finite']))
    if first >= 0:
      raise FloatingPointError(
          f'non-finite loss or gradients at step {self._step + first + 1}; stopped at step {step} without saving; '
          f'the latest checkpoint (step {checkpoints.latest_step()}) and the best one are kept. Lower '
          'optimizer.learning_rate, set optimizer.grad_clip_norm or check the data, then re-run to resume from '
          'the latest checkpoint')

  def scores(self, step: int, num_steps: int, learning_rate: Callable, count_unit: str) -> dict[str, float]:
    """Averages per counted item, the last step's norms and learning rate, the items counted per step
    (target tokens: fairseq's 'wpb'), rates over the training time (evaluation and checkpoint writes left
    out, and reported as 'excluded_seconds') and the ETA at the step budget; starts a new window."""
    sums = _first_device(self.sums)
    steps = step - self._step
    excluded = self._excluded_seconds
    steps_per_second = steps / (time.perf_counter() - self._start - excluded)
    averages = summarize([sums['metrics']], keep_count=True)
    per_step = averages.pop('count') / steps
    scores = averages | {name: float(sums[name]) for name in NORMS} | {
        'learning_rate': float(learning_rate(step - 1)), 'steps_per_second': steps_per_second,
        f'{count_unit}_per_step': per_step, f'{count_unit}_per_second': per_step * steps_per_second,
        'excluded_seconds': excluded, 'eta_minutes': (num_steps - step) / steps_per_second / 60}
    self._restart(step)
    return scores


def _host_state(replicated: train_state.TrainState) -> train_state.TrainState:
  return jax.device_get(flax.jax_utils.unreplicate(replicated))


def _check_compatible(expected: dict, step: int, saved: dict) -> None:
  """Refuses a checkpoint made for another model or with other task artifacts (a vocabulary)."""
  if saved['artifacts'] != expected['artifacts']:
    raise ValueError(f'checkpoint at step {step} was trained with different task artifacts '
                     f'({sorted(saved["artifacts"])}); refusing to resume with a different vocabulary')
  saved_model = upgrade_old_model(saved['model'], expected['model'])
  differing = sorted(k for k in set(saved_model) | set(expected['model'])
                     if saved_model.get(k) != expected['model'].get(k))
  if differing:
    raise ValueError(f'checkpoint at step {step} has a different model config; differing keys: '
                     + ', '.join(f'model.{k} ({saved_model.get(k)!r} -> {expected["model"].get(k)!r})'
                                 for k in differing)
                     + '. A new model needs a new --workdir; this one resumes only the model it holds')


def _test_best(checkpoints: Checkpoints, template: train_state.TrainState, p_eval_step: Callable,
               task: Task) -> dict[str, Any]:
  best_step, state, record = checkpoints.restore_best(template)
  return {'best_step': best_step, 'validation': record['best']['validation']} | _test_scores(
      p_eval_step, replicate(state.params), task, 'best', f'best step {best_step}')


def _test_average(checkpoints: Checkpoints, template: Params, p_eval_step: Callable, task: Task) -> dict[str, Any]:
  """Validation and test scores of the mean of the kept evaluated parameters (fairseq's average_checkpoints)."""
  steps, params = checkpoints.restore_evaluated(template)
  replicated = replicate(average_parameters(params))
  what = f'average of steps {steps[0]}-{steps[-1]}'
  validation = evaluate(p_eval_step, replicated, task.eval_batches('validation'), f'{what}: evaluating on validation')
  if task.score_validation:
    validation |= task.score_validation(replicated)
  return {'steps': steps, 'validation': validation} | _test_scores(p_eval_step, replicated, task, 'averaged', what)


def average_parameters(params: Sequence[Params]) -> Params:
  """The elementwise mean of parameter trees, summed in float64 and returned in each leaf's dtype."""
  return jax.tree.map(lambda *leaves: np.mean(np.stack(leaves).astype(np.float64), axis=0).astype(leaves[0].dtype),
                      *params)


def _test_scores(p_eval_step: Callable, replicated_params: Params, task: Task, which: str, what: str
                 ) -> dict[str, Any]:
  """Scores of `which` parameters ('best', 'averaged') on every test split; the first is the headline 'test'."""
  test_sets = {}
  for split in task.test_splits:
    test_sets[split] = evaluate(p_eval_step, replicated_params, task.eval_batches(split), f'{what}: testing on {split}')
    if task.score_test:
      test_sets[split] |= task.score_test(replicated_params, split, which)
  return {'test': test_sets[task.test_splits[0]], 'test_sets': test_sets}


def _write_run_files(workdir: str, config: ml_collections.ConfigDict, artifacts: dict) -> None:
  """What a workdir says about its run before training: the config and the task's artifacts."""
  write_json(os.path.join(workdir, 'artifacts.json'), artifacts)
  write_json(os.path.join(workdir, 'config.json'), config.to_dict())


def _read_json(path: str) -> dict:
  with open(path) as f:
    return json.load(f)


def write_json(path: str, payload: dict, *, sort_keys: bool = True) -> None:
  """`payload` as `path`, whole or not at all (a reader never sees a half-written file); keys sorted, for
  stable diffs, unless their order carries meaning."""
  temporary = path + '.tmp'
  with open(temporary, 'w') as f:
    json.dump(payload, f, indent=2, sort_keys=sort_keys)
  os.replace(temporary, path)
