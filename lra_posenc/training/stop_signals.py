"""SIGTERM (preemption) and SIGINT (Ctrl-C) become a request the train loop polls.

The loop then runs up to 10 steps more (the request travels to every host inside a train
step and is read every 5 steps: step_window.AgreedStop), saves a checkpoint and returns, in
one process or many, every process after the same step. A second Ctrl-C
interrupts at once, as Python's default would.
"""
import signal
import threading

from absl import logging

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
  """A context manager that routes SIGTERM and SIGINT to `requested()` while it is open."""

  def __init__(self):
    self._event = threading.Event()
    self._previous = {}

  def requested(self) -> bool:
    return self._event.is_set()

  def _handle(self, signum, frame) -> None:
    del frame
    if signum == signal.SIGINT:  # A second Ctrl-C goes to Python's handler: KeyboardInterrupt.
      signal.signal(signal.SIGINT, self._previous.get(signal.SIGINT, signal.default_int_handler))
    logging.warning('%s received: saving a checkpoint after this step, then stopping',
                    signal.Signals(signum).name)
    self._event.set()

  def __enter__(self) -> 'StopSignals':
    if threading.current_thread() is threading.main_thread():  # Only the main thread may set handlers.
      self._previous = {signum: signal.signal(signum, self._handle) for signum in SIGNALS}
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def close(self) -> None:
    """Gives SIGTERM and SIGINT back to the handlers from before (a second call does nothing)."""
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}
