"""The one train loop every task shares: set up, restore, train with evaluations and checkpoints, then test.

A task supplies a model's loss and metrics, its batches, its artifacts and its settings (`task.Task`); the
steps, device placement, evaluation, the run record and the workdir's files each have a module of their own.
"""
import contextlib
import dataclasses
import functools
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from lra_posenc.training import checkpointing, distributed, evaluation, optim, placement, steps
from lra_posenc.training import workdir as workdir_files
from lra_posenc.training.checkpointing import Checkpoints
from lra_posenc.training.metric_writer import MetricWriter
from lra_posenc.training.provenance import provenance
from lra_posenc.training.run_record import RunRecord, RunSpan, check_resumable
from lra_posenc.training.step_window import AgreedStop, StepWindow
from lra_posenc.training.stop_signals import StopSignals
from lra_posenc.training.task import Task


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
  run's span and training time (`runs`); with `evaluation.average_last` N, the mean of the
  parameters of the last N evaluations is scored beside the best checkpoint ('averaged').
  Re-running a finished workdir returns its results.json as it is; training it further (more steps or
  patience) first sets that file aside, as results.step_STEP.json, and a changed config.json as
  config.step_STEP.json.
  """
  # Workdir: every process checks, so a host that cannot write fails the run now.
  distributed.check_everywhere(lambda: workdir_files.prepare_workdir(workdir), f'writing to workdir {workdir!r}')
  settings = task.settings
  num_steps, patience = settings.training.num_train_steps, settings.training.patience

  # Model, optimizer and PRNG keys.
  init_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(settings.seed))
  state = steps.create_state(task, init_rng)
  logging.info('parameters: %d', sum(x.size for x in jax.tree.leaves(state.params)))
  attention_paths = {name: dataclasses.asdict(path) for name, path in task.attention_paths.items()}
  for name, path in attention_paths.items():
    logging.info('%s: %s%s', name, path['implementation'], f" ({path['reason']})" if path['reason'] else '')
  distributed.check_everywhere(
      lambda: workdir_files.check_free_space(workdir, state, settings.checkpoint.max_to_keep,
                                             settings.evaluation.average_last, checkpointing.bytes_held(workdir)),
      'checking free space in the workdir')
  record = RunRecord(rng=np.asarray(dropout_rng).tolist(), model=settings.model_record, artifacts=task.artifacts)
  p_train_step, p_eval_step = steps.pmapped_steps(task)

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
    results_path = os.path.join(workdir, workdir_files.RESULTS_FILE)
    done = step >= num_steps or record.out_of_patience(patience)
    if done and distributed.gather_flags(os.path.exists(results_path))[0]:  # Process 0's view.
      logging.info('%s already finished training at step %d; its results.json is kept (more steps: raise '
                   'training.num_train_steps or training.patience; a new run: a new --workdir)', workdir, step)
      return (workdir_files.read_json(results_path) if os.path.exists(results_path)
              else {'status': 'finished', 'step': step})
    distributed.on_primary(functools.partial(workdir_files.write_run_files, workdir, settings.config_record,
                                             task.artifacts, step),
                           'writing config.json and artifacts.json')
    writer = stack.enter_context(MetricWriter(workdir, resume_step=step))

    # Compile.
    replicated = placement.replicate(state)
    rng = placement.replicate(jnp.asarray(record.rng, jnp.uint32))
    batches = placement.device_batches(task.train_batches(step), size=2)
    learning_rate = optim.learning_rate_schedule(settings.optimizer, num_steps)
    requests = {requested: placement.stop_requests(requested) for requested in (False, True)}
    run_start = time.perf_counter()
    first_batch = next(batches)
    batches = itertools.chain([first_batch], batches)
    sums = steps.zero_sums(task, replicated, first_batch, rng, requests[False])
    compile_seconds = 0.0 if done else steps.compile_train_steps(  # Done: cut short while testing; test only.
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
          checkpoints.save_latest(step, placement.host_copy(replicated), saved(record, step))
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
    results = evaluation.test_best(checkpoints, state, p_eval_step, task)
    if settings.evaluation.average_last:
      results['averaged'] = evaluation.test_average(checkpoints, state.params, p_eval_step, task)
    results |= {'status': 'finished', 'step': step, 'training_ended': ended, 'config': settings.config_record,
                'baselines': task.baselines, **({'data': task.data_report} if task.data_report else {}),
                'train_seconds_this_run': runs[-1]['train_seconds'], 'steps_this_run': step - first_step,
                'train_seconds_total': sum(run['train_seconds'] for run in runs), 'runs': runs,
                'attention': attention_paths, 'provenance': provenance()}
    if distributed.is_primary():
      workdir_files.write_json(results_path, results)
    writer.write(step, {f'test_{k}': v for k, v in results['test'].items() if isinstance(v, (int, float))},
                 prefix='final')
  return results


def _evaluate_and_select(step: int, replicated: Any, record: RunRecord, p_eval_step: Callable, task: Task,
                         writer: MetricWriter, checkpoints: Checkpoints,
                         saved: Callable[[RunRecord, int], dict[str, Any]]) -> RunRecord:
  """Scores the validation split at `step`, logs it, and saves the parameters as the best checkpoint when they
  are, and among the evaluated ones when the last evaluations are averaged. Returns the updated record."""
  keep_evaluated = bool(task.settings.evaluation.average_last)
  scores = evaluation.validation_scores(p_eval_step, replicated.params, task, f'step {step}')
  writer.write(step, scores, prefix='validation')
  record = record.after_evaluation(step, scores, task.settings.evaluation.selection_metric)
  improved = record.best.step == step
  if improved or keep_evaluated:
    host_state = placement.host_copy(replicated)
    if improved:
      checkpoints.save_best(step, host_state, saved(record, step))
    if keep_evaluated:
      checkpoints.save_evaluated(step, host_state.params)
  return record
