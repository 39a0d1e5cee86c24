"""The one train loop both tasks share: pmapped steps, evaluation, checkpoints, resume.

A task supplies a model's loss and metrics, its batches and its artifacts (`Task`);
everything else (devices, PRNG, optimizer, checkpointing, logging, results) is here.
"""
import dataclasses
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from flax.training import train_state

from lra_posenc.training import optim
from lra_posenc.training.batches import Batch
from lra_posenc.training.checkpointing import Checkpoints
from lra_posenc.training.config_checks import check_keys, check_positive
from lra_posenc.training.metric_writer import MetricWriter

AXIS = 'batch'
TOP_LEVEL_KEYS = ('seed', 'data', 'model', 'optimizer', 'training', 'evaluation', 'checkpoint')
TRAINING_KEYS = ('batch_size', 'num_train_steps', 'log_every_steps')
EVALUATION_KEYS = ('batch_size', 'every_steps')
CHECKPOINT_KEYS = ('every_steps', 'max_to_keep')

Params = Any
Metrics = dict[str, jax.Array]


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
    selection_metric: validation metric (higher is better) that picks the best checkpoint.
    artifacts: JSON data a checkpoint is only valid with (a vocabulary): saved with every
      checkpoint, and a resume with different artifacts is refused.
    baselines: reference scores reported beside the results (majority-class accuracy).
    test_splits: the splits the best checkpoint is scored on; the first is the headline
      'test' result, all of them are under 'test_sets'.
    score_test: (best params, replicated over local devices; split) -> further test scores
      (BLEU of decoded output), or None.
    config_sections: top-level config sections the task reads beyond the trainer's.
  """
  init_params: Callable[[jax.Array], Params]
  metrics: Callable[[Params, Batch, jax.Array | None], Metrics]
  train_batches: Callable[[int], Iterator[Batch]]
  eval_batches: Callable[[str], Iterable[Batch]]
  selection_metric: str
  artifacts: dict[str, Any]
  baselines: dict[str, float]
  test_splits: tuple[str, ...] = ('test',)
  score_test: Callable[[Params, str], dict[str, Any]] | None = None
  config_sections: tuple[str, ...] = ()


def check_config(config: ml_collections.ConfigDict, task_sections: Sequence[str] = ()) -> None:
  """Validates the sections the trainer reads; tasks check `data`, `model` and `task_sections`."""
  check_keys(config, 'config', TOP_LEVEL_KEYS + tuple(task_sections))
  check_keys(config.training, 'training', TRAINING_KEYS)
  check_keys(config.evaluation, 'evaluation', EVALUATION_KEYS)
  check_keys(config.checkpoint, 'checkpoint', CHECKPOINT_KEYS)
  check_positive(config.training, 'training', *TRAINING_KEYS)
  check_positive(config.evaluation, 'evaluation', *EVALUATION_KEYS)
  check_positive(config.checkpoint, 'checkpoint', *CHECKPOINT_KEYS)
  optim.check_config(config.optimizer)
  for path, size in (('training.batch_size', config.training.batch_size),
                     ('evaluation.batch_size', config.evaluation.batch_size)):
    if size % jax.device_count():
      raise ValueError(f'{path}={size} is not divisible by the {jax.device_count()} devices')


def train_step(state: train_state.TrainState, batch: Batch, rng: jax.Array, *, task: Task
               ) -> tuple[train_state.TrainState, Metrics, jax.Array]:
  """One optimizer step on the global batch, split across the `AXIS` devices.

  Returns the new state, the metric sums and whether loss and gradients were finite; a
  non-finite step leaves the state as it was (the host loop then stops the run).
  """
  rng = jax.random.fold_in(jax.random.fold_in(rng, state.step), jax.lax.axis_index(AXIS))
  global_count = jax.lax.psum(batch['weight'].sum(), AXIS)

  def loss_fn(params):
    metrics = task.metrics(params, batch, rng)
    return metrics['loss'] / global_count, metrics

  grads, metrics = jax.lax.psum(jax.grad(loss_fn, has_aux=True)(state.params), AXIS)
  finite = jnp.isfinite(metrics['loss']) & jnp.all(jnp.stack([jnp.isfinite(g).all() for g in jax.tree.leaves(grads)]))
  updated = state.apply_gradients(grads=grads)
  return jax.tree.map(lambda new, old: jnp.where(finite, new, old), updated, state), metrics, finite


def eval_step(params: Params, batch: Batch, *, task: Task) -> Metrics:
  return jax.lax.psum(task.metrics(params, batch, None), AXIS)


def pmapped_steps(task: Task) -> tuple[Callable, Callable]:
  """`train_step` (donating the state) and `eval_step` over the local devices: the trainer's and benchmark's."""
  p_train_step = jax.pmap(lambda s, b, r: train_step(s, b, r, task=task), axis_name=AXIS, donate_argnums=0)
  p_eval_step = jax.pmap(lambda p, b: eval_step(p, b, task=task), axis_name=AXIS)
  return p_train_step, p_eval_step


def create_state(config: ml_collections.ConfigDict, task: Task, init_rng: jax.Array) -> train_state.TrainState:
  """Freshly initialised parameters and the optimizer `config.optimizer` describes, on one device."""
  tx = optim.create_optimizer(config.optimizer, config.training.num_train_steps)
  return train_state.TrainState.create(apply_fn=None, params=jax.jit(task.init_params)(init_rng), tx=tx)


def shard(batch: Batch) -> Batch:
  """[host_batch, ...] -> [local_devices, host_batch / local_devices, ...]."""
  return jax.tree.map(lambda x: x.reshape((jax.local_device_count(), -1) + x.shape[1:]), batch)


def summarize(metric_sums: list[Metrics]) -> dict[str, float]:
  """Averages per example from per-step (device-0) sums."""
  totals = jax.tree.map(lambda *xs: float(np.sum(xs)), *jax.device_get(metric_sums))
  count = totals.pop('count')
  return {k: v / count for k, v in totals.items()}


def evaluate(p_eval_step: Callable, params: Params, batches: Iterable[Batch]) -> dict[str, float]:
  return summarize([flax.jax_utils.unreplicate(p_eval_step(params, shard(b))) for b in batches])


def prepare_workdir(workdir: str) -> None:
  """Creates `workdir` and writes to it, so an unusable one fails now, naming itself, not hours later."""
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, f'.write_probe_{os.getpid()}')
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


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, task: Task,
                       should_stop: Callable[[int], bool] | None = None) -> dict[str, Any]:
  """Trains, or resumes training in `workdir`, then scores the best checkpoint on the test split.

  Stops early, after saving a checkpoint, on SIGTERM or when `should_stop(step)` says so;
  re-running the same call resumes. Returns the results also written to results.json.
  """
  check_config(config, task.config_sections)
  prepare_workdir(workdir)
  num_steps = config.training.num_train_steps
  init_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  learning_rate = optim.learning_rate_schedule(config.optimizer, num_steps)
  state = create_state(config, task, init_rng)
  logging.info('parameters: %d', sum(x.size for x in jax.tree.leaves(state.params)))
  check_free_space(workdir, state, config.checkpoint.max_to_keep)

  checkpoints = Checkpoints(workdir, max_to_keep=config.checkpoint.max_to_keep)
  meta = {'step': 0, 'data_position': 0, 'rng': np.asarray(dropout_rng).tolist(), 'best': None,
          'model': config.model.to_dict(), 'artifacts': task.artifacts}
  if checkpoints.latest.latest_step() is not None:
    state, meta = _resume(checkpoints, state, meta)
  if jax.process_index() == 0:
    _write_json(os.path.join(workdir, 'artifacts.json'), task.artifacts)
    _write_json(os.path.join(workdir, 'config.json'), config.to_dict())

  p_train_step, p_eval_step = pmapped_steps(task)
  writer = MetricWriter(workdir)
  sigterm = _SigtermFlag()
  step = int(state.step)
  rng = flax.jax_utils.replicate(jnp.asarray(meta['rng'], jnp.uint32))
  replicated = flax.jax_utils.replicate(state)

  def snapshot() -> tuple[Any, dict]:
    host_state = jax.device_get(flax.jax_utils.unreplicate(replicated))
    return host_state, meta | {'step': step, 'data_position': meta['data_position'] + step - meta['step']}

  unchecked_steps: list[jax.Array] = []  # Per-step finiteness flags not yet read on the host.

  def ensure_finite() -> None:
    """Stops the run at the first non-finite step, before anything is logged or saved after it."""
    flags = np.asarray(jax.device_get(unchecked_steps), bool)
    first = step - len(flags) + 1
    unchecked_steps.clear()
    if not flags.all():
      checkpoints.wait()
      latest = checkpoints.latest.latest_step()
      checkpoints.close()
      writer.close()
      raise FloatingPointError(
          f'non-finite loss or gradients at step {first + int(np.argmin(flags))}; stopped at step {step} without '
          f'saving; the latest checkpoint (step {latest}) and the best one are kept. Lower optimizer.learning_rate, '
          'set optimizer.grad_clip_norm or check the data, then re-run to resume from the latest checkpoint')

  def validate() -> None:
    ensure_finite()
    scores = evaluate(p_eval_step, replicated.params, task.eval_batches('validation'))
    writer.write(step, scores, prefix='validation')
    score = scores[task.selection_metric]
    if meta['best'] is None or score > meta['best']['score']:
      host_state, record = snapshot()
      record['best'] = {'step': step, 'score': score, 'validation': scores}
      Checkpoints.save(checkpoints.best, step, host_state, record)
      meta['best'] = record['best']

  def save_latest() -> None:
    ensure_finite()
    host_state, record = snapshot()
    Checkpoints.save(checkpoints.latest, step, host_state, record)

  batches = flax.jax_utils.prefetch_to_device(
      map(shard, task.train_batches(meta['data_position'])), size=2)
  window: list[Metrics] = []
  window_start, window_step = time.perf_counter(), step
  run_start, run_first_step = window_start, step
  with sigterm:
    while step < num_steps:
      replicated, metrics, finite = p_train_step(replicated, next(batches), rng)
      window.append(flax.jax_utils.unreplicate(metrics))
      unchecked_steps.append(finite[0])
      step += 1
      if step % config.training.log_every_steps == 0 or step == num_steps:
        ensure_finite()
        scores = summarize(window)
        elapsed = time.perf_counter() - window_start
        steps_per_second = (step - window_step) / elapsed
        scores |= {'learning_rate': float(learning_rate(step - 1)), 'steps_per_second': steps_per_second,
                   'examples_per_second': steps_per_second * config.training.batch_size,
                   'eta_minutes': (num_steps - step) / steps_per_second / 60}
        writer.write(step, scores, prefix='train')
        window, window_start, window_step = [], time.perf_counter(), step
      if step % config.evaluation.every_steps == 0 or step == num_steps:
        validate()
      if step % config.checkpoint.every_steps == 0 or step == num_steps:
        save_latest()
      if step < num_steps and (sigterm.is_set() or (should_stop and should_stop(step))):
        logging.warning('stopping at step %d; re-run the same command to resume', step)
        save_latest()
        checkpoints.wait()
        checkpoints.close()
        writer.close()
        return {'stopped_at_step': step}
  train_seconds = time.perf_counter() - run_start
  checkpoints.wait()
  results = _test_best(checkpoints, state, p_eval_step, task)
  results |= {'config': config.to_dict(), 'baselines': task.baselines, 'train_seconds_this_run': train_seconds,
              'steps_this_run': step - run_first_step}
  checkpoints.close()
  if jax.process_index() == 0:
    _write_json(os.path.join(workdir, 'results.json'), results)
  writer.write(step, {f'test_{k}': v for k, v in results['test'].items() if isinstance(v, (int, float))},
               prefix='final')
  writer.close()
  return results


def _resume(checkpoints: Checkpoints, template: train_state.TrainState, meta: dict
            ) -> tuple[train_state.TrainState, dict]:
  """Restores the newest readable checkpoint, refusing one made for another model or task artifacts.

  Unreadable newer checkpoints (damaged files, a write cut short) are set aside with a
  warning, never deleted; an incompatible one is an error, not a reason to fall back.
  """
  unreadable = []
  for step in sorted(checkpoints.latest.all_steps(), reverse=True):
    try:
      saved = Checkpoints.restore_meta(checkpoints.latest, step)
    except Exception as error:  # Orbax raises many types for damaged files.
      _warn_unreadable(step, error)
      unreadable.append(step)
      continue
    _check_compatible(step, saved, meta)
    try:
      state, saved = Checkpoints.restore(checkpoints.latest, step, template)
    except Exception as error:  # As above; the structure matched, as the model config did.
      _warn_unreadable(step, error)
      unreadable.append(step)
      continue
    for bad_step in unreadable:
      logging.warning('moved the unreadable checkpoint of step %d to %s', bad_step, checkpoints.set_aside(bad_step))
    logging.info('resumed from step %d (data position %d)', step, saved['data_position'])
    return state, saved
  raise ValueError(f'no checkpoint in {checkpoints.latest.directory} can be restored (steps {unreadable}); move '
                   'the directory away to start afresh')


def _warn_unreadable(step: int, error: Exception) -> None:
  logging.warning('checkpoint at step %d cannot be restored (%s: %s); trying the one before', step,
                  type(error).__name__, str(error)[:300])


def _check_compatible(step: int, saved: dict, meta: dict) -> None:
  if saved['artifacts'] != meta['artifacts']:
    raise ValueError(f'checkpoint at step {step} was trained with different task artifacts '
                     f'({sorted(saved["artifacts"])}); refusing to resume with a different vocabulary')
  differing = sorted(k for k in set(saved['model']) | set(meta['model'])
                     if saved['model'].get(k) != meta['model'].get(k))
  if differing:
    raise ValueError(f'checkpoint at step {step} has a different model config; differing keys: '
                     + ', '.join(f'model.{k} ({saved["model"].get(k)!r} -> {meta["model"].get(k)!r})'
                                 for k in differing))


def _test_best(checkpoints: Checkpoints, template: train_state.TrainState, p_eval_step: Callable,
               task: Task) -> dict[str, Any]:
  best_step = checkpoints.best.latest_step()
  state, record = Checkpoints.restore(checkpoints.best, best_step, template)
  replicated_params = flax.jax_utils.replicate(state.params)
  test_sets = {}
  for split in task.test_splits:
    test_sets[split] = evaluate(p_eval_step, replicated_params, task.eval_batches(split))
    if task.score_test:
      test_sets[split] |= task.score_test(replicated_params, split)
  return {'best_step': best_step, 'validation': record['best']['validation'], 'test': test_sets[task.test_splits[0]],
          'test_sets': test_sets}


def _write_json(path: str, payload: dict) -> None:
  temporary = path + '.tmp'
  with open(temporary, 'w') as f:
    json.dump(payload, f, indent=2, sort_keys=True)
  os.replace(temporary, path)


class _SigtermFlag:
  """Turns SIGTERM into a flag the loop polls, so preemption saves a checkpoint first."""

  def __init__(self):
    self._event = threading.Event()
    self._previous = None

  def is_set(self) -> bool:
    return self._event.is_set()

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, lambda *_: self._event.set())
    return self

  def __exit__(self, *exc):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
