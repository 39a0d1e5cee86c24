"""Scalars to the log, to TensorBoard event files (tensorboardX, no TensorFlow) and to metrics.jsonl.

metrics.jsonl holds one JSON object per write ({"step", "prefix", scalars...}) so that
sweeps and plots read training curves without a TensorBoard reader. A run resumed from a
checkpoint at step S drops the records after S (the resumed run writes them again: resume
is exact, though a first train record after an S between log steps averages the steps since
S alone) and the 'final' records, so a resumed run's history reads as an uninterrupted one's;
TensorBoard is told likewise to purge steps after S.
`read_history` keeps the last record per (prefix, step).
"""
import json
import logging as std_logging
import os

from absl import logging
from tensorboardX import SummaryWriter

from lra_posenc.data.files import written_whole
from lra_posenc.training import distributed

HISTORY_FILE = 'metrics.jsonl'


class MetricWriter:
  """Writes from the first host only; the others hold the same reduced values."""

  def __init__(self, workdir: str, resume_step: int = 0):
    self._events = self._history = None
    if distributed.is_primary():
      self._events = SummaryWriter(os.path.join(workdir, 'tensorboard'), purge_step=resume_step + 1)
      path = os.path.join(workdir, HISTORY_FILE)
      if os.path.exists(path):
        _keep_history_up_to(path, resume_step)
      self._history = open(path, 'a', encoding='utf-8')

  def write(self, step: int, scalars: dict[str, float], *, prefix: str) -> None:
    if self._events is None:
      return
    logging.info('[%d] %s: %s', step, prefix, ', '.join(f'{k}={_format(v)}' for k, v in scalars.items()))
    for key, value in scalars.items():
      self._events.add_scalar(f'{prefix}/{key}', value, step)
    self._events.flush()
    self._history.write(json.dumps({'step': step, 'prefix': prefix} | scalars, sort_keys=True) + '\n')
    self._history.flush()

  def __enter__(self) -> 'MetricWriter':
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def close(self) -> None:
    if self._events is not None:
      self._events.close()
      self._history.close()


def read_history(workdir: str, prefix: str) -> list[dict]:
  """The records written under `prefix`, one per step (the latest write wins), sorted by step."""
  path = os.path.join(workdir, HISTORY_FILE)
  records = {}
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      for line in f:
        try:
          record = json.loads(line)
        except json.JSONDecodeError:  # Blank, or cut short by a killed run; its step is written again on resume.
          continue
        if record['prefix'] == prefix:
          records[record['step']] = record
  return [records[step] for step in sorted(records)]


def _keep_history_up_to(path: str, step: int) -> None:
  """Rewrites `path` (atomically) without the records after `step`, the 'final' ones and any cut short."""
  with open(path, encoding='utf-8') as f:
    lines = f.read().splitlines()
  kept = []
  for line in lines:
    try:
      record = json.loads(line)
    except json.JSONDecodeError:  # Blank, or cut short by a killed run.
      continue
    if record['step'] <= step and record['prefix'] != 'final':
      kept.append(line + '\n')
  with written_whole(path, encoding='utf-8') as f:
    f.writelines(kept)


def _format(value: float) -> str:
  return f'{value:.4g}' if isinstance(value, float) else str(value)


def quiet_checkpoint_logs() -> None:
  """Drops Orbax's INFO records (a dozen per save) from the absl log; its warnings stay."""
  std_logging.getLogger('absl').addFilter(
      lambda record: record.levelno >= std_logging.WARNING or '/orbax/' not in record.pathname)
