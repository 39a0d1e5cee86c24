"""Scalars to the log and to TensorBoard event files (written by tensorboardX, no TensorFlow)."""
import logging as std_logging
import os

import jax
from absl import logging
from tensorboardX import SummaryWriter


class MetricWriter:
  """Writes from the first host only; the others hold the same reduced values."""

  def __init__(self, workdir: str):
    self._events = None
    if jax.process_index() == 0:
      self._events = SummaryWriter(os.path.join(workdir, 'tensorboard'))

  def write(self, step: int, scalars: dict[str, float], *, prefix: str) -> None:
    if self._events is None:
      return
    logging.info('[%d] %s: %s', step, prefix, ', '.join(f'{k}={_format(v)}' for k, v in scalars.items()))
    for key, value in scalars.items():
      self._events.add_scalar(f'{prefix}/{key}', value, step)
    self._events.flush()

  def close(self) -> None:
    if self._events is not None:
      self._events.close()


def _format(value: float) -> str:
  return f'{value:.4g}' if isinstance(value, float) else str(value)


def quiet_checkpoint_logs() -> None:
  """Drops Orbax's INFO records (a dozen per save) from the absl log; its warnings stay."""
  std_logging.getLogger('absl').addFilter(
      lambda record: record.levelno >= std_logging.WARNING or '/orbax/' not in record.pathname)
