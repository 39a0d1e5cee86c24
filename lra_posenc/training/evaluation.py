"""Scoring parameters with the pmapped evaluation step: validation during training, the test splits after it."""
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np

from lra_posenc import progress
from lra_posenc.training.batches import Batch
from lra_posenc.training.checkpointing import Checkpoints
from lra_posenc.training.placement import host_copy, replicate, shard
from lra_posenc.training.task import Metrics, Params, Task


def metric_averages(metric_sums: list[Metrics], keep_count: bool = False) -> dict[str, float]:
  """Averages per counted item (example, or target token for translation) from per-step (device-0) sums;
  with `keep_count`, the total count too."""
  totals = jax.tree.map(lambda *xs: float(np.sum(xs)), *jax.device_get(metric_sums))
  count = totals.pop('count')
  return {k: v / count for k, v in totals.items()} | ({'count': count} if keep_count else {})


def evaluate(p_eval_step: Callable, params: Params, batches: Iterable[Batch], what: str = 'evaluating'
             ) -> dict[str, float]:
  """Metric averages over `batches`, with progress (and an ETA where their number is known) under `what`.

  Each batch's sums are fetched before the next is counted, so progress is work done, not dispatched.
  """
  return metric_averages([host_copy(p_eval_step(params, shard(b)))
                          for b in progress.track(batches, what, unit='batches')])


def validation_scores(p_eval_step: Callable, replicated_params: Params, task: Task, what: str) -> dict[str, float]:
  """The validation split's metric averages and the task's further validation scores (BLEU)."""
  batches = task.eval_batches('validation')
  scores = evaluate(p_eval_step, replicated_params, batches, f'{what}: evaluating on validation')
  if task.score_validation:
    scores |= task.score_validation(replicated_params)
  return scores


def test_scores(p_eval_step: Callable, replicated_params: Params, task: Task, which: str, what: str
                ) -> dict[str, Any]:
  """Scores of `which` parameters ('best', 'averaged') on every test split; the first is the headline 'test'."""
  test_sets = {}
  for split in task.test_splits:
    test_sets[split] = evaluate(p_eval_step, replicated_params, task.eval_batches(split), f'{what}: testing on {split}')
    if task.score_test:
      test_sets[split] |= task.score_test(replicated_params, split, which)
  return {'test': test_sets[task.test_splits[0]], 'test_sets': test_sets}


def test_best(checkpoints: Checkpoints, template: Any, p_eval_step: Callable, task: Task) -> dict[str, Any]:
  """The best checkpoint's step, its validation scores (as recorded) and its test scores."""
  best_step, state, record = checkpoints.restore_best(template)
  return {'best_step': best_step, 'validation': record['best']['validation']} | test_scores(
      p_eval_step, replicate(state.params), task, 'best', f'best step {best_step}')


def test_average(checkpoints: Checkpoints, template: Params, p_eval_step: Callable, task: Task) -> dict[str, Any]:
  """Validation and test scores of the mean of the kept evaluated parameters (fairseq's average_checkpoints)."""
  steps, params = checkpoints.restore_evaluated(template)
  replicated = replicate(average_parameters(params))
  what = f'average of steps {steps[0]}-{steps[-1]}'
  return {'steps': steps, 'validation': validation_scores(p_eval_step, replicated, task, what)} | test_scores(
      p_eval_step, replicated, task, 'averaged', what)


def average_parameters(params: Sequence[Params]) -> Params:
  """The elementwise mean of parameter trees, summed in float64 and returned in each leaf's dtype."""
  return jax.tree.map(lambda *leaves: np.mean(np.stack(leaves).astype(np.float64), axis=0).astype(leaves[0].dtype),
                      *params)
