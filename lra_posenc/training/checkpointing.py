"""Orbax checkpoints: the latest few for resuming, the best one for the test score, and the
parameters of the last few evaluations for checkpoint averaging.

Each checkpoint holds the train state (params, optimizer state, step) and a JSON
record: the PRNG key, the best validation score so far, the model config and the
task's artifacts (for ListOps, the vocabulary). This file is the only one that speaks
Orbax. With several processes every process takes part in every save and restore, and
the managers name their barriers apart, so all may save at one step.
"""
import contextlib
import os
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import orbax.checkpoint as ocp
from absl import logging

from lra_posenc.training import distributed
from lra_posenc.training.config_checks import task_of, upgrade_old_config
from lra_posenc.training.workdir import CONFIG_FILE, read_json

ITEMS = ('state', 'meta')  # 'meta' holds the record (the name older workdirs were written with).
LATEST_DIR, BEST_DIR, EVALUATED_DIR, UNREADABLE_DIR = 'checkpoints', 'best', 'evaluated', 'checkpoints.unreadable'


def _manager(directory: str, *, max_to_keep: int | None, read_only: bool = False,
             this_process_only: bool = False) -> ocp.CheckpointManager:
  """An Orbax manager of `directory`; `this_process_only` (read-only) enters no cross-process barrier."""
  multiprocessing = {'barrier_sync_key_prefix': os.path.basename(directory)}
  if this_process_only:
    multiprocessing |= {'primary_host': jax.process_index(), 'active_processes': {jax.process_index()}}
  options = ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep, create=not read_only, read_only=read_only,
      multiprocessing_options=ocp.options.MultiprocessingOptions(**multiprocessing))
  return ocp.CheckpointManager(directory, item_names=ITEMS, options=options)


def _save(manager: ocp.CheckpointManager, step: int, state: Any, record: dict) -> None:
  if step not in manager.all_steps():
    manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(record)))


def _restore_record(manager: ocp.CheckpointManager, step: int) -> dict:
  """Only the JSON record saved at `step`: cheap, and readable whatever the state's structure."""
  return manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))['meta']


def _restore(manager: ocp.CheckpointManager, step: int, template: Any = None) -> tuple[Any, dict]:
  """The state (shaped like `template`, or as saved when None) and the record saved at `step`."""
  restored = manager.restore(
      step, args=ocp.args.Composite(state=ocp.args.StandardRestore(template), meta=ocp.args.JsonRestore()))
  return restored['state'], restored['meta']


class Checkpoints:
  """The run's checkpoints in WORKDIR/checkpoints (latest `max_to_keep`), WORKDIR/best (one) and, with
  `evaluated_to_keep`, the parameters of that many latest evaluations in WORKDIR/evaluated.

  A context manager: leaving it waits for pending writes and closes every manager,
  whatever ends the run.
  """

  def __init__(self, workdir: str, *, max_to_keep: int, evaluated_to_keep: int = 0):
    self.workdir = os.path.abspath(workdir)
    self._latest = _manager(os.path.join(self.workdir, LATEST_DIR), max_to_keep=max_to_keep)
    self._best = _manager(os.path.join(self.workdir, BEST_DIR), max_to_keep=1)
    self._evaluated = (_manager(os.path.join(self.workdir, EVALUATED_DIR), max_to_keep=evaluated_to_keep)
                       if evaluated_to_keep else None)

  def __enter__(self) -> 'Checkpoints':
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def latest_step(self) -> int | None:
    return self._latest.latest_step()

  def best_step(self) -> int | None:
    return self._best.latest_step()

  def save_latest(self, step: int, state: Any, record: dict) -> None:
    _save(self._latest, step, state, record)

  def save_best(self, step: int, state: Any, record: dict) -> None:
    _save(self._best, step, state, record)

  def save_evaluated(self, step: int, params: Any) -> None:
    """Keeps `params` of an evaluation step among the last `evaluated_to_keep`, for averaging."""
    _save(self._evaluated, step, params, {'step': step})

  def restore_evaluated(self, template: Any = None) -> tuple[list[int], list[Any]]:
    """The kept evaluation steps, oldest first, and their parameters (shaped like `template`)."""
    self._evaluated.wait_until_finished()
    steps = sorted(self._evaluated.all_steps())
    if not steps:
      raise FileNotFoundError(f'{self.workdir}/{EVALUATED_DIR}: no evaluated parameters yet; train first')
    return steps, [_restore(self._evaluated, step, template)[0] for step in steps]

  def restore(self, step: int, template: Any = None) -> tuple[Any, dict]:
    """The latest-checkpoints entry at `step`."""
    return _restore(self._latest, step, template)

  def restore_best(self, template: Any = None) -> tuple[int, Any, dict]:
    """(step, state, record) of the best checkpoint, once any write of it has finished."""
    self._best.wait_until_finished()
    step = self.best_step()
    if step is None:
      raise FileNotFoundError(f'{self.workdir}/{BEST_DIR}: no checkpoint yet; train first')
    return (step,) + _restore(self._best, step, template)

  def restore_newest_readable(self, template: Any, check: Callable[[int, dict], None]
                              ) -> tuple[Any, dict] | None:
    """The newest latest-checkpoint every process can read, or None when there is none yet.

    `check(step, record)` raises for a checkpoint that must not be resumed (another model):
    that is an error, not a reason to fall back. Unreadable newer checkpoints (damaged
    files, a write cut short) are moved to WORKDIR/checkpoints.unreadable with a warning,
    never deleted. Readability is agreed by all processes, so all resume from one step:
    each reads through a manager of its own, whose reads enter no barrier, so a read that
    fails on one process alone cannot leave the others waiting in Orbax's.
    """
    steps = sorted(self._latest.all_steps(), reverse=True)
    if not steps:
      return None
    reader = _manager(self._latest.directory, max_to_keep=None, read_only=True, this_process_only=True)
    try:
      unreadable = []
      for step in steps:
        record = self._readable_everywhere(step, lambda: _restore_record(reader, step))
        if record is not None:
          check(step, record)
          restored = self._readable_everywhere(step, lambda: _restore(reader, step, template))
          if restored is not None:
            if unreadable:  # Only once a readable one is found: with none, nothing is moved.
              distributed.on_primary(lambda: self._set_aside(unreadable), f'setting aside checkpoints {unreadable}')
              self._latest.reload()
            return restored
        unreadable.append(step)
    finally:
      reader.close()
    raise ValueError(f'no checkpoint in {self.workdir}/{LATEST_DIR} can be restored (steps {steps}); move '
                     'the directory away to start afresh')

  @staticmethod
  def _readable_everywhere(step: int, read: Callable[[], Any]) -> Any | None:
    """`read()`'s value if it succeeded on every process, else None (with this host's reason logged)."""
    value = None
    try:
      value = read()
    except Exception as error:  # Orbax raises many types for damaged files.
      logging.warning('checkpoint at step %d cannot be restored (%s: %s); trying the one before', step,
                      type(error).__name__, str(error)[:300])
    everywhere = distributed.gather_flags(value is not None).all()
    if not everywhere and value is not None:
      logging.warning('checkpoint at step %d cannot be restored on another process; trying the one before', step)
    return value if everywhere else None

  def _set_aside(self, steps: list[int]) -> None:
    """Moves the checkpoints of `steps` to WORKDIR/checkpoints.unreadable, never over an earlier one."""
    for step in steps:
      target = os.path.join(self.workdir, UNREADABLE_DIR, str(step))
      suffix = 0
      while os.path.exists(target + (f'.{suffix}' if suffix else '')):
        suffix += 1
      target += f'.{suffix}' if suffix else ''
      os.makedirs(os.path.dirname(target), exist_ok=True)
      os.replace(os.path.join(self.workdir, LATEST_DIR, str(step)), target)
      logging.warning('moved the unreadable checkpoint of step %d to %s', step, target)

  def close(self) -> None:
    """Waits for pending writes, then closes every manager, each even if one before it fails."""
    with contextlib.ExitStack() as stack:  # Closes in reverse order, every one whatever the others raise.
      for manager in (self._latest, self._best, self._evaluated):
        if manager is not None:
          stack.callback(manager.close)
          stack.callback(manager.wait_until_finished)


def read_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a workdir was trained with (keys renamed since, under their new names), for reading the run.

  The attention path is how the training machine computed, not what was trained, so an explicit
  'cudnn' reads as 'auto' (cuDNN where this machine can serve a call, XLA elsewhere): a run trained
  on a GPU is scored, decoded and drawn on a CPU.
  """
  config_path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(config_path):
    raise FileNotFoundError(f'{config_path}: not a training workdir (no {CONFIG_FILE})')
  config = ml_collections.ConfigDict(upgrade_old_config(read_json(config_path)))
  if config.get('model', {}).get('attention_implementation') == 'cudnn':
    config.model.attention_implementation = 'auto'
  return config


def read_task_config(workdir: str, task: str) -> ml_collections.ConfigDict:
  """The config `workdir` was trained with, if `task`'s trainer (lra_posenc.TASK.train) trained it; else a
  ValueError saying which task's it is."""
  config = read_config(workdir)
  if (found := task_of(config)) != task:
    raise ValueError(f'{workdir} is not a {task} workdir: its {CONFIG_FILE} has task {found!r}; give a workdir of '
                     f'lra_posenc.{task}.train')
  return config


def restore_best(workdir: str, task: str | None = None) -> tuple[ml_collections.ConfigDict, Any, int]:
  """The config a finished (or running) workdir was trained with, its best params and their step; with `task`,
  a workdir of another task's is a ValueError before anything is restored.

  Reads only; creates nothing.
  """
  config = read_config(workdir) if task is None else read_task_config(workdir, task)
  best_dir = os.path.join(os.path.abspath(workdir), BEST_DIR)
  (step,), (state,) = _restore_read_only(best_dir, 'no checkpoint yet; train first', newest_only=True)
  return config, state['params'], step


def restore_evaluated(workdir: str) -> tuple[list[int], list[Any]]:
  """The steps (oldest first) and parameters of the evaluations a workdir kept for averaging
  (`evaluation.average_last`). Reads only; creates nothing.
  """
  return _restore_read_only(os.path.join(os.path.abspath(workdir), EVALUATED_DIR),
                            'no evaluated parameters (evaluation.average_last was 0, or nothing was evaluated yet)')


def _restore_read_only(directory: str, missing: str, *, newest_only: bool = False) -> tuple[list[int], list[Any]]:
  """The steps of `directory` (or its newest one) and the states saved there, without writing anything."""
  if not os.path.isdir(directory):
    raise FileNotFoundError(f'{directory}: {missing}')
  manager = _manager(directory, max_to_keep=None, read_only=True)
  try:
    steps = sorted(manager.all_steps())[-1:] if newest_only else sorted(manager.all_steps())
    if not steps:
      raise FileNotFoundError(f'{directory}: {missing}')
    return steps, [_restore(manager, step)[0] for step in steps]
  finally:
    manager.close()
