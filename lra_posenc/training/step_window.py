"""The train loop's view of the steps since the last log step, and of stop requests, read without waiting."""
import contextlib
import time
from collections.abc import Callable, Iterator

import jax

from lra_posenc.training.checkpointing import Checkpoints
from lra_posenc.training.evaluation import metric_averages
from lra_posenc.training.placement import host_copy
from lra_posenc.training.steps import NORMS, StepSums


class AgreedStop:
  """Whether any process asked to stop, read every `STOP_READ_EVERY` steps from the step sums of the read before.

  That step finished long ago, so the read does not make the host wait for the device, and every process
  reads the same step's flag: all stop after the same step, at most 2 * `STOP_READ_EVERY` steps after the
  request.
  """
  STOP_READ_EVERY = 5

  def __init__(self):
    self._pending: jax.Array | None = None

  def read(self, step: int, sums: StepSums) -> bool:
    if step % self.STOP_READ_EVERY:
      return False
    previous, self._pending = self._pending, sums['stop']
    return previous is not None and bool(host_copy(previous))


class StepWindow:
  """The steps since the last log step: their `StepSums` on the device, their time on the host.

  `sums` is the train step's carry; it is fetched only at log steps (`scores`) and before anything is
  written (`raise_if_non_finite`). Time spent in `excluded()` (evaluation, checkpoint writes) is not
  training time: the rates leave it out.
  """

  def __init__(self, step: int, zeros: StepSums):
    self._zeros = zeros  # Not donated by the train step, so one copy starts every window.
    self._restart(step)

  def _restart(self, step: int) -> None:
    self.sums, self._step = self._zeros, step
    self._start, self._excluded_seconds = time.perf_counter(), 0.0

  @contextlib.contextmanager
  def excluded(self) -> Iterator[None]:
    jax.block_until_ready(self.sums)  # The steps already queued count as training.
    start = time.perf_counter()
    try:
      yield
    finally:
      self._excluded_seconds += time.perf_counter() - start

  def raise_if_non_finite(self, step: int, checkpoints: Checkpoints) -> None:
    """Stops the run at the first non-finite step, before anything is logged or saved after it."""
    first = int(host_copy(self.sums['first_non_finite']))
    if first >= 0:
      latest = checkpoints.latest_step()
      kept, rerun = ((f'the latest checkpoint (step {latest}) and the best one are kept', 'resume from it')
                     if latest is not None else ('no checkpoint was saved before it', 'start again'))
      raise FloatingPointError(
          f'non-finite loss or gradients at step {self._step + first + 1}; stopped at step {step} without saving; '
          f'{kept}. Lower optimizer.learning_rate, set optimizer.grad_clip_norm or check the data, then re-run to '
          f'{rerun}')

  def scores(self, step: int, num_steps: int, learning_rate: Callable, count_unit: str) -> dict[str, float]:
    """Averages per counted item, the last step's norms and learning rate, the items counted per step
    (target tokens: fairseq's 'wpb'), rates over the training time (evaluation and checkpoint writes left
    out, and reported as 'excluded_seconds') and the ETA at the step budget; starts a new window."""
    sums = host_copy(self.sums)
    steps = step - self._step
    excluded = self._excluded_seconds
    steps_per_second = steps / (time.perf_counter() - self._start - excluded)
    averages = metric_averages([sums['metrics']], keep_count=True)
    per_step = averages.pop('count') / steps
    scores = averages | {name: float(sums[name]) for name in NORMS} | {
        'learning_rate': float(learning_rate(step - 1)), 'steps_per_second': steps_per_second,
        f'{count_unit}_per_step': per_step, f'{count_unit}_per_second': per_step * steps_per_second,
        'excluded_seconds': excluded, 'eta_minutes': (num_steps - step) / steps_per_second / 60}
    self._restart(step)
    return scores
