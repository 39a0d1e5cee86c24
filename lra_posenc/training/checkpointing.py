"""Orbax checkpoints: the latest few for resuming, and the best one for the test score.

Each checkpoint holds the train state (params, optimizer state, step) and a JSON
record: the data position, the PRNG key, the best validation score so far, the model
config and the task's artifacts (for ListOps, the vocabulary).
"""
import os
from typing import Any

import orbax.checkpoint as ocp

ITEMS = ('state', 'meta')


class Checkpoints:

  def __init__(self, workdir: str, *, max_to_keep: int):
    def manager(subdir: str, keep: int) -> ocp.CheckpointManager:
      return ocp.CheckpointManager(os.path.join(os.path.abspath(workdir), subdir), item_names=ITEMS,
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

  def wait(self) -> None:
    self.latest.wait_until_finished()
    self.best.wait_until_finished()

  def close(self) -> None:
    self.latest.close()
    self.best.close()
