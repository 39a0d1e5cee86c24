"""Orbax checkpoints: the latest few for resuming, and the best one for the test score.

Each checkpoint holds the train state (params, optimizer state, step) and a JSON
record: the data position, the PRNG key, the best validation score so far, the model
config and the task's artifacts (for ListOps, the vocabulary).
"""
import json
import os
from typing import Any

import ml_collections
import orbax.checkpoint as ocp

ITEMS = ('state', 'meta')


class Checkpoints:

  def __init__(self, workdir: str, *, max_to_keep: int):
    self.workdir = os.path.abspath(workdir)

    def manager(subdir: str, keep: int) -> ocp.CheckpointManager:
      return ocp.CheckpointManager(os.path.join(self.workdir, subdir), item_names=ITEMS,
                                   options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

    self.latest = manager('checkpoints', max_to_keep)
    self.best = manager('best', 1)

  @staticmethod
  def save(manager: ocp.CheckpointManager, step: int, state: Any, meta: dict) -> None:
    if step in manager.all_steps():
      return
    manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)))

  @staticmethod
  def restore(manager: ocp.CheckpointManager, step: int, template: Any = None) -> tuple[Any, dict]:
    """The state (shaped like `template`, or as saved when None) and the record saved at `step`."""
    restored = manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(template), meta=ocp.args.JsonRestore()))
    return restored['state'], restored['meta']

  @staticmethod
  def restore_meta(manager: ocp.CheckpointManager, step: int) -> dict:
    """Only the JSON record saved at `step`: cheap, and readable whatever the state's structure."""
    return manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))['meta']

  def set_aside(self, step: int) -> str:
    """Moves an unreadable latest-checkpoint out of the manager's sight (never deleting it); returns where."""
    target = os.path.join(self.workdir, 'checkpoints.unreadable', str(step))
    suffix = 0
    while os.path.exists(target + (f'.{suffix}' if suffix else '')):
      suffix += 1
    target += f'.{suffix}' if suffix else ''
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.replace(os.path.join(self.workdir, 'checkpoints', str(step)), target)
    self.latest.reload()
    return target

  def wait(self) -> None:
    self.latest.wait_until_finished()
    self.best.wait_until_finished()

  def close(self) -> None:
    self.latest.close()
    self.best.close()


def restore_best(workdir: str) -> tuple[ml_collections.ConfigDict, Any, int]:
  """The config a finished (or running) workdir was trained with, its best params and their step."""
  config_path = os.path.join(workdir, 'config.json')
  if not os.path.exists(config_path):
    raise FileNotFoundError(f'{config_path}: not a training workdir (no config.json)')
  with open(config_path) as f:
    config = ml_collections.ConfigDict(json.load(f))
  checkpoints = Checkpoints(workdir, max_to_keep=config.checkpoint.max_to_keep)
  try:
    best_step = checkpoints.best.latest_step()
    if best_step is None:
      raise FileNotFoundError(f'{workdir}/best: no checkpoint yet; train first')
    state, _ = Checkpoints.restore(checkpoints.best, best_step)
  finally:
    checkpoints.close()
  return config, state['params'], best_step
