"""Scalars to the log, to TensorBoard event files (tensorboardX, no TensorFlow) and to metrics.jsonl.

metrics.jsonl holds one JSON object per write ({"step", "prefix", scalars...}) so that
sweeps and plots read training curves without a TensorBoard reader. A resumed run
appends; `read_history` keeps the last record per (prefix, step).
"""
import json
import logging as std_logging
import os

from absl import logging
from tensorboardX import SummaryWriter

from lra_posenc.training import distributed

HISTORY_FILE = 'metrics.jsonl'


class MetricWriter:
  """Writes from the first host only; the others hold the same reduced values."""

  def __init__(self, workdir: str):
    self._events = self._history = None
    if distributed.is_primary():
      self._events = SummaryWriter(os.path.join(workdir, 'tensorboard'))
      path = os.path.join(workdir, HISTORY_FILE)
      cut_short = os.path.exists(path) and os.path.getsize(path) and not _ends_with_newline(path)
      self._history = open(path, 'a', encoding='utf-8')
      if cut_short:  # A killed run's last record was cut short: start a new line after it.
        self._history.write('\n')

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


def _ends_with_newline(path: str) -> bool:
  with open(path, 'rb') as f:
    f.seek(-1, os.SEEK_END)
    return f.read(1) == b'\n'


def _format(value: float) -> str:
  return f'{value:.4g}' if isinstance(value, float) else str(value)


def quiet_checkpoint_logs() -> None:
  """Drops Orbax's INFO records (a dozen per save) from the absl log; its warnings stay."""
  std_logging.getLogger('absl').addFilter(
      lambda record: record.levelno >= std_logging.WARNING or '/orbax/' not in record.pathname)
