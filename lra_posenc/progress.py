"""Progress of long waits (data generation, evaluation, decoding): what, how far along, and an ETA.

On a terminal the report redraws one line, like a progress bar; in a log file (stderr not a
terminal) it is a plain log line at most every `every_seconds`, and always a last line with
the total time, so a long phase is never silent.
"""
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, TypeVar

from absl import logging

T = TypeVar('T')


class Progress:
  """Counts units of work done towards `total` (None: unknown) and reports them under `what`."""

  def __init__(self, what: str, total: int | None, *, unit: str = '', every_seconds: float = 10.0,
               stream: TextIO | None = None):
    self.what, self.total, self.unit, self.every_seconds = what, total, unit, every_seconds
    self._stream = stream if stream is not None else sys.stderr
    self._terminal = self._stream.isatty()
    self.done = 0
    self._start = self._last_report = time.perf_counter()

  def update(self, amount: int = 1) -> None:
    self.done += amount
    now = time.perf_counter()
    if now - self._last_report >= (0.2 if self._terminal else self.every_seconds):
      self._last_report = now
      self._report(self.describe(now))

  def close(self) -> None:
    """Reports the finished phase with its total time."""
    elapsed = time.perf_counter() - self._start
    line = f'{self.what}: {self._count()} in {_duration(elapsed)}'
    if self._terminal:
      self._stream.write('\r\033[K')
    logging.info(line)

  def describe(self, now: float | None = None) -> str:
    """'WHAT: done/total unit (percent), elapsed, ETA' as far as known."""
    elapsed = (time.perf_counter() if now is None else now) - self._start
    line = f'{self.what}: {self._count()}'
    if self.total:
      line += f' ({self.done / self.total:.0%})'
    line += f', {_duration(elapsed)} elapsed'
    if self.total and self.done:
      line += f', ETA {_duration(elapsed / self.done * (self.total - self.done))}'
    return line

  def _count(self) -> str:
    unit = f' {self.unit}' if self.unit else ''
    return f'{self.done}/{self.total}{unit}' if self.total else f'{self.done}{unit}'

  def _report(self, line: str) -> None:
    if self._terminal:
      self._stream.write('\r\033[K' + line)
      self._stream.flush()
    else:
      logging.info(line)

  def __enter__(self) -> 'Progress':
    return self

  def __exit__(self, *exc_info: Any) -> None:
    self.close()


def track(items: Iterable[T], what: str, *, unit: str = '', every_seconds: float = 10.0) -> Iterator[T]:
  """`items`, reporting progress as they are consumed, out of len(items) where they have a length."""
  total = len(items) if hasattr(items, '__len__') else None
  with Progress(what, total, unit=unit, every_seconds=every_seconds) as progress:
    for item in items:
      yield item
      progress.update()


def _duration(seconds: float) -> str:
  if seconds < 60:
    return f'{seconds:.1f} s'
  minutes, seconds = divmod(int(seconds), 60)
  return f'{minutes} min {seconds:02d} s' if minutes < 60 else f'{minutes // 60} h {minutes % 60:02d} min'
