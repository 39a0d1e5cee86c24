"""What a task gives the shared train loop (its model's loss and metrics, its batches, its artifacts), and what it
gives the benchmarks: its model on synthetic batches."""
import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np

from lra_posenc.models import flops
from lra_posenc.training.batches import Batch
from lra_posenc.training.settings import TrainerSettings

Params = Any
Metrics = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class Task:
  """What the trainer needs from a task.

  Attributes:
    init_params: rng -> model parameters.
    metrics: (params, batch, dropout rng or None for evaluation) -> metric sums over the
      batch's examples, weighted by batch['weight']; must include 'loss' (the summed
      training loss) and 'count' (the summed weight).
    train_batches: global batch index -> endless iterator of this host's training batches.
    eval_batches: split name -> this host's batches of that split, padded with zero weight.
    artifacts: JSON data a checkpoint is only valid with (a vocabulary): saved with every
      checkpoint, and a resume with different artifacts is refused.
    baselines: reference scores reported beside the results (majority-class accuracy).
    data_report: what the task found in its data that results.json reports (characters outside the vocabulary).
    settings: the trainer's settings, read from the config once by the task's factory; its
      `evaluation.selection_metric` (higher is better) picks the best checkpoint: one of `metrics`' or of
      `score_validation`'s.
    test_splits: the splits the best checkpoint is scored on; the first is the headline
      'test' result, all of them are under 'test_sets'.
    score_test: (params replicated over local devices, split, which: 'best' or 'averaged') -> further
      test scores (BLEU of decoded output), or None.
    score_validation: (params, replicated over local devices) -> further validation scores
      (BLEU of greedy decoding) added to every evaluation's, or None.
    attention_paths: how each of the model's attention calls computes in training (name ->
      a dataclass with `implementation` and `reason`); logged once, written to results.json.
    count_unit: what `metrics`' 'count' counts ('examples'; 'target_tokens' for translation), logged
      per step and per second.
    train_batch_shapes: the shapes of `train_batches`' batches (one per length bucket): the train step is
      compiled for all of them, concurrently, before the first step. A shape not named compiles when its
      first batch comes.

  A task's factory validates the whole config (with `settings.read_trainer_settings` for the trainer's
  sections) before it reads any data; the trainer reads only the settings.
  """
  init_params: Callable[[jax.Array], Params]
  metrics: Callable[[Params, Batch, jax.Array | None], Metrics]
  train_batches: Callable[[int], Iterator[Batch]]
  eval_batches: Callable[[str], Iterable[Batch]]
  artifacts: dict[str, Any]
  baselines: dict[str, float]
  settings: TrainerSettings
  test_splits: tuple[str, ...] = ('test',)
  data_report: dict[str, Any] = dataclasses.field(default_factory=dict)
  score_test: Callable[[Params, str, str], dict[str, Any]] | None = None
  score_validation: Callable[[Params], dict[str, float]] | None = None
  attention_paths: dict[str, Any] = dataclasses.field(default_factory=dict)
  count_unit: str = 'examples'
  train_batch_shapes: tuple[dict[str, jax.ShapeDtypeStruct], ...] = ()


@dataclasses.dataclass(frozen=True)
class Workload:
  """A task's model with synthetic batches of its config's training shapes (each task's `benchmark_workload`).

  Attributes:
    task: the model's parameters and metrics as the trainer uses them (no data), with the trainer's settings
      (seed, batch sizes).
    batch: (examples, rng) -> a batch of random tokens, every position filled.
    forward_flops: matrix-product FLOPs of the forward pass, per example and per call.
    tokens_per_example: tokens one example carries (source and target for translation).
    dtype: the matrix products' dtype (`model.dtype`), which sets the device's peak for MFU.
    decode: windows -> the task's decoding figures (translation: beam search's sentences/s), timed on random
      parameters; None for a task that decodes nothing.
  """
  task: Task
  batch: Callable[[int, np.random.Generator], Batch]
  forward_flops: flops.ForwardFlops
  tokens_per_example: int
  dtype: str
  decode: Callable[[int], dict[str, Any]] | None = None

  @property
  def seed(self) -> int:
    return self.task.settings.seed

  @property
  def train_batch_size(self) -> int:
    return self.task.settings.training.batch_size


def synthetic_task(settings: TrainerSettings, init_params: Callable, metrics: Callable,
                   attention_paths: dict[str, Any]) -> Task:
  """A task with a model and no data: what a `Workload` gives the trainer's steps."""
  return Task(init_params=init_params, metrics=metrics, train_batches=None, eval_batches=None, artifacts={},
              baselines={}, settings=settings, attention_paths=attention_paths)


def timed_windows(run_window: Callable[[], Any], windows: int) -> list[float]:
  """Seconds of each of `windows` calls after one untimed warm-up call; `run_window` must synchronise."""
  seconds = []
  for window in range(windows + 1):
    start = time.perf_counter()
    run_window()
    if window:
      seconds.append(time.perf_counter() - start)
  return seconds
