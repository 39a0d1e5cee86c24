"""Orbax checkpoints: the latest few for resuming, the best one for the test score, and the
parameters of the last few evaluations for checkpoint averaging; and the run record, what a run carries from
checkpoint to checkpoint besides its state (typed, saved as JSON), with the check that a resume may go on.

A latest or best checkpoint holds the train state (params, optimizer state, step) and a JSON
record: the PRNG key, the best validation score so far, the model config and the task's
artifacts (for ListOps, the vocabulary); an evaluated one, the params and its step. This
file is the only one that speaks Orbax. With several processes every process takes part in
every save and restore, and the managers name their barriers apart, so all may save at one
step.
"""
import contextlib
import dataclasses
import logging as std_logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import flax
import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from lra_posenc.training import distributed
from lra_posenc.training.run_files import CONFIG_FILE, read_json
from lra_posenc.training.settings import ConfigHistory, task_of, upgrade_old_config

LATEST_DIR, BEST_DIR, EVALUATED_DIR = 'checkpoints', 'best', 'evaluated'


def _manager(directory: str, *, max_to_keep: int | None, read_only: bool = False,
             this_process_only: bool = False) -> ocp.CheckpointManager:
  """An Orbax manager of `directory`; `this_process_only` (read-only) enters no cross-process barrier."""
  multiprocessing = {'barrier_sync_key_prefix': os.path.basename(directory)}
  if this_process_only:
    multiprocessing |= {'primary_host': jax.process_index(), 'active_processes': {jax.process_index()}}
  # 'meta' holds the record (the name older workdirs were written with). Handlers named up front let a read
  # of the state's metadata (shapes, no arrays) know how the state was written.
  handlers = {'state': ocp.StandardCheckpointHandler(), 'meta': ocp.JsonCheckpointHandler()}
  with _without_read_only_notices() if read_only else contextlib.nullcontext():
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=not read_only, read_only=read_only,
        multiprocessing_options=ocp.options.MultiprocessingOptions(**multiprocessing))
    return ocp.CheckpointManager(directory, item_handlers=handlers, options=options)


def _is_read_only_notice(record: std_logging.LogRecord) -> bool:
  """Orbax's two warnings that a manager opened to read is read-only ('Given directory is read only', and that it
  sets save_interval_steps=0): what was asked for, on a new user's first screen four times (a fresh workdir's
  resume looks for checkpoints to read in checkpoints/ and best/)."""
  message = record.getMessage()
  return '/orbax/' in record.pathname and ('directory is read only' in message
                                           or 'read_only=True, setting save_interval_steps=0' in message)


@contextlib.contextmanager
def _without_read_only_notices() -> Iterator[None]:
  """absl's log (Orbax's) without `_is_read_only_notice` records, while a reading manager is made."""
  absl_logger = std_logging.getLogger('absl')
  keep = lambda record: not _is_read_only_notice(record)
  absl_logger.addFilter(keep)
  try:
    yield
  finally:
    absl_logger.removeFilter(keep)


def _save(manager: ocp.CheckpointManager, step: int, state: Any, record: dict) -> None:
  """Saves, or raises: Orbax declines, returning False, a step not after the directory's newest."""
  if not manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                    meta=ocp.args.JsonSave(record))):
    raise RuntimeError(f'{manager.directory}: Orbax declined to save step {step} (steps held: '
                       f'{sorted(manager.all_steps())}); a checkpoint may only follow the newest one')


def _restore_record(manager: ocp.CheckpointManager, step: int) -> dict:
  """Only the JSON record saved at `step`: cheap, and readable whatever the state's structure."""
  return manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))['meta']


def _restore(manager: ocp.CheckpointManager, step: int, template: Any = None) -> tuple[Any, dict]:
  """The state (shaped like `template`, or as saved when None) and the record saved at `step`."""
  restored = manager.restore(
      step, args=ocp.args.Composite(state=ocp.args.StandardRestore(template), meta=ocp.args.JsonRestore()))
  return restored['state'], restored['meta']


def _raise_if_other_structure(manager: ocp.CheckpointManager, step: int, template: Any) -> None:
  """Raises, on every process, if any process finds in the metadata of the state saved at `step` (no arrays
  read) that it was built otherwise than `template`: parameters of other shapes (a key outside `model` that sizes
  the model changed) or an optimizer state of another structure. That is a healthy checkpoint of another run,
  not a damaged one to be set aside, and restoring it into `template` would fail."""
  try:
    saved = manager.item_metadata(step)['state'].tree
  except Exception:  # Unreadable metadata: damaged, which restoring finds and the caller handles.
    saved = None
  differing = []
  if saved is not None:
    saved, expected = _shapes(saved), _shapes(flax.serialization.to_state_dict(template))
    differing = [f'{path} {saved.get(path, "absent")} -> {expected.get(path, "absent")}'
                 for path in sorted(saved.keys() | expected.keys()) if saved.get(path) != expected.get(path)]
  in_params = [difference for difference in differing if difference.startswith('params/')]
  if not distributed.gather_flags(bool(differing)).any():
    return
  if distributed.gather_flags(bool(in_params)).any():
    found = _listed(in_params) if in_params else 'on another process'
    raise ValueError(f'checkpoint at step {step} holds parameters of other shapes than this config builds ({found}): '
                     'a key outside `model` that sizes the model changed (data.max_length, data.num_classes?). A '
                     'new model needs a new --workdir; this one resumes only the model it holds')
  found = _listed(differing) if differing else 'on another process'
  raise ValueError(f'checkpoint at step {step} holds an optimizer state of another structure than this config '
                   f'builds ({found}): optimizer.grad_clip_norm switched between 0 and above 0? Resume with the value '
                   'it was trained with, or start a new --workdir')


def _listed(differences: list[str]) -> str:
  return '; '.join(differences[:4]) + ('; ...' if len(differences) > 4 else '')


def _shapes(tree: Any) -> dict[str, tuple[int, ...]]:
  """Each leaf's shape (arrays and Orbax's array metadata alike) by its path of keys, indices and field names
  alike (a tuple saved as a list, a named tuple as a dict of its fields, name the same leaves)."""
  def key_name(key: Any) -> str:
    for attribute in ('key', 'idx', 'name'):  # DictKey, SequenceKey, GetAttrKey.
      if hasattr(key, attribute):
        return str(getattr(key, attribute))
    return str(key)

  return {'/'.join(map(key_name, path)): tuple(np.shape(leaf))  # np.shape reads a `.shape` where there is one.
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def bytes_held(workdir: str) -> int:
  """What the checkpoints in `workdir` take on disk (0 before the first)."""
  return sum(os.path.getsize(os.path.join(root, name))
             for directory in (LATEST_DIR, BEST_DIR, EVALUATED_DIR)
             for root, _, names in os.walk(os.path.join(workdir, directory)) for name in names)


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
    """The newest state every process can read, or None when there is none yet: the newest latest checkpoint,
    or the best one where that is newer (a run that ended between an improving evaluation and the next
    checkpoint), so that no checkpoint is ever ahead of the resumed step to be silently kept over a new one.

    `check(step, record)` raises for a checkpoint that must not be resumed (another model):
    that is an error, not a reason to fall back. Unreadable newer checkpoints (damaged
    files, a write cut short) are moved to WORKDIR/checkpoints.unreadable (best.unreadable)
    with a warning, never deleted. Evaluated parameters after the resumed step, which the
    run evaluates again, are moved to WORKDIR/evaluated.superseded. Readability is agreed by
    all processes, so all resume from one step: each reads through a manager of its own,
    whose reads enter no barrier, so a read that fails on one process alone cannot leave
    the others waiting in Orbax's.
    """
    latest_steps = self._latest.all_steps()
    latest, unreadable = self._newest_readable(self._latest, latest_steps, template, check)
    if latest_steps and latest is None:  # Nothing is moved: the directory is the user's to look at.
      raise ValueError(f'no checkpoint in {self.workdir}/{LATEST_DIR} can be restored (steps '
                       f'{sorted(latest_steps)}); move the directory away to start afresh')
    self._move_aside(self._latest, unreadable, 'unreadable')
    best_steps = [step for step in self._best.all_steps() if latest is None or step > latest[0]]
    best, unreadable = self._newest_readable(self._best, best_steps, template, check)
    self._move_aside(self._best, unreadable, 'unreadable')
    restored = best or latest
    if restored is None:
      return None
    if best:
      logging.info('the best checkpoint (step %d) is newer than any latest one; resuming from it', best[0])
    if self._evaluated is not None:
      self._move_aside(self._evaluated, [step for step in self._evaluated.all_steps() if step > restored[0]],
                       'superseded')
    return restored[1:]

  def _newest_readable(self, manager: ocp.CheckpointManager, steps: Sequence[int], template: Any,
                       check: Callable[[int, dict], None]) -> tuple[tuple[int, Any, dict] | None, list[int]]:
    """(step, state, record) of the newest of `steps` every process can read (None if none), and the newer
    steps some process cannot read."""
    reader = _manager(manager.directory, max_to_keep=None, read_only=True, this_process_only=True)
    unreadable = []
    try:
      for step in sorted(steps, reverse=True):
        record = self._readable_everywhere(step, lambda: _restore_record(reader, step))
        if record is not None:
          check(step, record)
          _raise_if_other_structure(reader, step, template)
          restored = self._readable_everywhere(step, lambda: _restore(reader, step, template))
          if restored is not None:
            return (step,) + restored, unreadable
        unreadable.append(step)
    finally:
      reader.close()
    return None, unreadable

  def _move_aside(self, manager: ocp.CheckpointManager, steps: list[int], why: str) -> None:
    """Moves the checkpoints of `steps` from DIRECTORY to DIRECTORY.WHY beside it (process 0 moves; all then
    re-read the directory), never over an earlier one."""
    if not steps:
      return
    directory = os.fspath(manager.directory)
    distributed.on_primary(lambda: self._set_aside(directory, steps, why), f'moving {why} steps {steps} aside')
    manager.reload()

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

  @staticmethod
  def _set_aside(directory: str, steps: list[int], why: str) -> None:
    """Moves DIRECTORY/STEP to DIRECTORY.WHY/STEP (STEP.1, ... past an earlier one) for each of `steps`."""
    for step in steps:
      target = os.path.join(f'{directory}.{why}', str(step))
      suffix = 0
      while os.path.exists(target + (f'.{suffix}' if suffix else '')):
        suffix += 1
      target += f'.{suffix}' if suffix else ''
      os.makedirs(os.path.dirname(target), exist_ok=True)
      os.replace(os.path.join(directory, str(step)), target)
      logging.warning('moved the %s checkpoint of step %d to %s', why, step, target)

  def close(self) -> None:
    """Waits for pending writes, then closes every manager, each even if one before it fails."""
    with contextlib.ExitStack() as stack:  # Closes in reverse order, every one whatever the others raise.
      for manager in (self._latest, self._best, self._evaluated):
        if manager is not None:
          stack.callback(manager.close)
          stack.callback(manager.wait_until_finished)


def read_config(workdir: str, histories: Mapping[str, ConfigHistory]) -> ml_collections.ConfigDict:
  """The config a workdir was trained with by one of the tasks of `histories` (task -> its ConfigHistory; a
  task's own code passes only its own), upgraded to today's keys; a workdir of another task is a ValueError
  saying whose it is.

  The attention path is how the training machine computed, not what was trained, so an explicit
  'cudnn' reads as 'auto' (cuDNN where this machine can serve a call, XLA elsewhere): a run trained
  on a GPU is scored, decoded and drawn on a CPU.
  """
  config_path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(config_path):
    raise FileNotFoundError(f'{config_path}: not a training workdir (no {CONFIG_FILE})')
  saved = read_json(config_path)
  wanted = f'{" or ".join(sorted(histories))} workdir'
  give = 'give a workdir of ' + ' or '.join(f'lra_posenc.{name}.train' for name in sorted(histories))
  try:
    task = task_of(saved, histories)
  except ValueError as error:  # An old config.json without `task`, of a task not in `histories`.
    raise ValueError(f'{workdir} is not a {wanted}: {CONFIG_FILE}: {error}; {give}') from None
  if task not in histories:
    raise ValueError(f'{workdir} is not a {wanted}: its {CONFIG_FILE} has task {task!r}; {give}')
  config = ml_collections.ConfigDict(upgrade_old_config(saved, histories))
  if config.get('model', {}).get('attention_implementation') == 'cudnn':
    config.model.attention_implementation = 'auto'
  return config


def restore_best(workdir: str, histories: Mapping[str, ConfigHistory]) -> tuple[ml_collections.ConfigDict, Any, int]:
  """The config a finished (or running) workdir was trained with (`read_config`: a workdir of a task not in
  `histories` is a ValueError before anything is restored), its best params and their step.

  Reads only; creates nothing.
  """
  config = read_config(workdir, histories)
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


@dataclasses.dataclass(frozen=True)
class BestEvaluation:
  """The evaluation with the highest selection metric so far."""
  step: int
  score: float
  validation: dict[str, float]


@dataclasses.dataclass(frozen=True)
class RunSpan:
  """One invocation's steps and host time; `compile_seconds` is None for spans recorded before it was."""
  first_step: int
  last_step: int
  train_seconds: float
  compile_seconds: float | None = None

  def to_json(self) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True)
class RunRecord:
  """The dropout PRNG key, the model and task artifacts a checkpoint is only valid with, the best evaluation,
  the evaluations since it (early stopping) and the earlier invocations' spans.

  A checkpoint saves `to_json()`, which `from_json` reads back.
  """
  rng: list[int]
  model: dict[str, Any]
  artifacts: dict[str, Any]
  best: BestEvaluation | None = None
  evaluations_since_best: int = 0
  runs: tuple[RunSpan, ...] = ()

  def to_json(self) -> dict[str, Any]:
    return {'rng': self.rng, 'model': self.model, 'artifacts': self.artifacts,
            'best': None if self.best is None else dataclasses.asdict(self.best),
            'evaluations_since_best': self.evaluations_since_best, 'runs': [run.to_json() for run in self.runs]}

  @classmethod
  def from_json(cls, saved: dict[str, Any]) -> 'RunRecord':
    return cls(rng=saved['rng'], model=saved['model'], artifacts=saved['artifacts'],
               best=None if saved['best'] is None else BestEvaluation(**saved['best']),
               evaluations_since_best=saved['evaluations_since_best'],
               runs=tuple(RunSpan(**run) for run in saved['runs']))

  def out_of_patience(self, patience: int) -> bool:
    """Whether `patience` evaluations in a row (0: never) missed the best: read from the record, so a resumed
    run agrees, as does every host."""
    return bool(patience) and self.evaluations_since_best >= patience

  def after_evaluation(self, step: int, scores: dict[str, float], selection_metric: str) -> 'RunRecord':
    """The record once the evaluation at `step` is counted: its new best, or one more evaluation since it."""
    if self.best is None or scores[selection_metric] > self.best.score:
      return dataclasses.replace(self, best=BestEvaluation(step, scores[selection_metric], scores),
                                 evaluations_since_best=0)
    return dataclasses.replace(self, evaluations_since_best=self.evaluations_since_best + 1)

  def with_run(self, run: RunSpan) -> 'RunRecord':
    return dataclasses.replace(self, runs=self.runs + (run,))


def check_resumable(expected: RunRecord, selection_metric: str, step: int, saved: dict[str, Any]) -> None:
  """Refuses a checkpoint's record made for another model, with other task artifacts (a vocabulary), from
  another seed (its dropout key would go on beside the new seed's batch order), or whose best evaluation was
  chosen by another metric than `selection_metric` (the next evaluations' scores would be compared with it)."""
  if saved['rng'] != expected.rng:
    raise ValueError(f'checkpoint at step {step} was trained with another config.seed (its dropout key differs); '
                     'a new seed needs a new --workdir, this one resumes only the seed it was started with')
  if saved['artifacts'] != expected.artifacts:
    raise ValueError(f'checkpoint at step {step} was trained with different task artifacts '
                     f'({sorted(saved["artifacts"])}); refusing to resume with a different vocabulary')
  saved_model = saved['model']
  differing = sorted(k for k in set(saved_model) | set(expected.model) if saved_model.get(k) != expected.model.get(k))
  if differing:
    raise ValueError(f'checkpoint at step {step} has a different model config; differing keys: '
                     + ', '.join(f'model.{k} ({saved_model.get(k)!r} -> {expected.model.get(k)!r})'
                                 for k in differing)
                     + '. A new model needs a new --workdir; this one resumes only the model it holds')
  best = saved['best']
  if best is not None and best['validation'].get(selection_metric) != best['score']:
    chosen_by = next((name for name, score in best['validation'].items() if score == best['score']), 'another metric')
    raise ValueError(f'checkpoint at step {step} chose its best evaluation (step {best["step"]}) by validation '
                     f'{chosen_by}, but evaluation.selection_metric={selection_metric!r}: its scores would be '
                     f'compared with that best; resume with evaluation.selection_metric={chosen_by!r}, or start a '
                     'new --workdir')
