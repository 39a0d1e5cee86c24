"""Throughput of the trainer's own steps, on synthetic batches of a config's shapes.

Each figure is the median over timed windows after an untimed warm-up window, with the
device synchronised at every window's end, so asynchronous dispatch cannot flatter it.
Batches stay in device memory, so only model and optimizer are timed;
`pipeline_gap` compares that with the real input pipeline and train loop.
"""
import collections
import dataclasses
import glob
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from lra_posenc.models import flops
from lra_posenc.training import trainer
from lra_posenc.training.batches import Batch
from lra_posenc.training.metric_writer import read_history
from lra_posenc.training.placement import device_batches, replicate, stop_requests
from lra_posenc.training.steps import create_state, pmapped_steps, zero_sums
from lra_posenc.training.settings import TrainerSettings
from lra_posenc.training.task import Task

# Dense peak TFLOP/s per device, by a substring of `device_kind` (first match wins) and the arithmetic its
# matrix products run in (`matmul_arithmetic`): bfloat16 and TF32 tensor cores, or full float32 (no tensor cores).
PEAK_TFLOPS = (
    ('H100 PCIe', {'bfloat16': 756.0, 'tf32': 378.0, 'float32': 51.2}),
    ('H100', {'bfloat16': 989.4, 'tf32': 494.7, 'float32': 66.9}),
    ('H200', {'bfloat16': 989.4, 'tf32': 494.7, 'float32': 66.9}),
    ('A100', {'bfloat16': 312.0, 'tf32': 156.0, 'float32': 19.5}),
)


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


def matmul_arithmetic(dtype: str, precision: str | None) -> str:
  """What a GPU multiplies `model.dtype` matrices in under JAX's default matmul precision `precision`: bfloat16
  inputs as they are; float32 in TF32 by default, in full float32 under 'highest' / 'float32', in one bfloat16
  pass under 'bfloat16'."""
  if dtype != 'float32':
    return dtype
  return {'highest': 'float32', 'float32': 'float32', 'bfloat16': 'bfloat16'}.get(str(precision).lower(), 'tf32')


def peak_flops(device_kind: str, dtype: str, precision: str | None = None) -> float | None:
  """The device's dense peak FLOP/s for `dtype` products under default matmul precision `precision`, or None
  where unknown (CPUs)."""
  for name, peaks in PEAK_TFLOPS:
    if name in device_kind:
      return peaks.get(matmul_arithmetic(dtype, precision), 0.0) * 1e12 or None
  return None


def peak_memory_bytes() -> int | None:
  """The first local device's peak allocation in this process so far, where the backend reports it (not CPU)."""
  stats = jax.local_devices()[0].memory_stats()
  return stats.get('peak_bytes_in_use') if stats else None


def timed_windows(run_window: Callable[[], Any], windows: int) -> list[float]:
  """Seconds of each of `windows` calls after one untimed warm-up call; `run_window` must synchronise."""
  seconds = []
  for window in range(windows + 1):
    start = time.perf_counter()
    run_window()
    if window:
      seconds.append(time.perf_counter() - start)
  return seconds


def _on_devices(batch: Batch) -> Batch:
  return next(device_batches([batch], size=1))


def _compiled_bytes(compiled) -> int:
  """XLA's estimate of one device's live bytes: arguments, outputs not aliased to them, temporaries."""
  stats = compiled.memory_analysis()
  return stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes + stats.temp_size_in_bytes


def train_step_memory(workload: Workload) -> dict[str, int]:
  """XLA's memory analysis of one device's compiled train step at `training.batch_size`.

  Compiled from shapes alone: no state is allocated and nothing runs, so a step too big
  for this machine's memory can still be sized. 'total_bytes' is `_compiled_bytes`.
  """
  devices = jax.local_device_count()
  per_device = lambda x: jax.ShapeDtypeStruct((devices,) + x.shape, x.dtype)
  state = jax.eval_shape(lambda: create_state(workload.task, jax.random.PRNGKey(0)))
  batch = workload.batch(workload.train_batch_size, np.random.default_rng(0))
  batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct((devices, x.shape[0] // devices) + x.shape[1:], x.dtype), batch)
  rng = jax.eval_shape(lambda: jax.random.PRNGKey(0))
  state, rng, no_stop = jax.tree.map(per_device, state), per_device(rng), jax.ShapeDtypeStruct((devices,), jnp.bool_)
  p_train_step, _ = pmapped_steps(workload.task)
  sums = zero_sums(workload.task, state, batch, rng, no_stop)
  compiled = p_train_step.lower(state, sums, batch, rng, no_stop).compile()
  stats = compiled.memory_analysis()
  return {'argument_bytes': stats.argument_size_in_bytes, 'output_bytes': stats.output_size_in_bytes,
          'alias_bytes': stats.alias_size_in_bytes, 'temp_bytes': stats.temp_size_in_bytes,
          'total_bytes': _compiled_bytes(compiled)}


class TrainStepTimer:
  """The pmapped train step at `training.batch_size`, compiled ahead of time, timed a window at a time.

  Timers of several encodings are best run by `interleaved_windows`, so that a machine
  that slows down for a while slows every encoding alike, not the one that ran then.
  """

  def __init__(self, workload: Workload):
    self.workload = workload
    self._batch = _on_devices(workload.batch(workload.train_batch_size, np.random.default_rng(workload.seed)))
    self._state = replicate(create_state(workload.task, jax.random.PRNGKey(workload.seed)))
    self._rng = replicate(jax.random.PRNGKey(workload.seed + 1))
    self._no_stop = stop_requests(False)
    self._zero_sums = zero_sums(workload.task, self._state, self._batch, self._rng, self._no_stop)
    p_train_step, _ = pmapped_steps(workload.task)
    start = time.perf_counter()
    self._step = p_train_step.lower(self._state, self._zero_sums, self._batch, self._rng, self._no_stop).compile()
    self.compile_seconds = time.perf_counter() - start
    self._state, sums = self._step(self._state, self._zero_sums, self._batch, self._rng, self._no_stop)
    self.first_step_loss = float(sums['metrics']['loss'][0] / sums['metrics']['count'][0])

  def run_window(self, steps: int) -> float:
    """Seconds for `steps` steps, synchronised with the device at the end."""
    start = time.perf_counter()
    for _ in range(steps):
      self._state, sums = self._step(self._state, self._zero_sums, self._batch, self._rng, self._no_stop)
    jax.block_until_ready((self._state, sums))
    return time.perf_counter() - start

  def summary(self, window_seconds: list[float], steps_per_window: int,
              peak_tflops: float | None = None) -> dict[str, Any]:
    """Median and best rates over the windows, compile time, memory, XLA's cost estimate and MFU.

    Interference on a shared host only ever slows a window, so the best window is the
    steadier estimate there; the median is the headline. XLA's FLOPs and bytes accessed
    are its cost analysis of the compiled program, free of timing noise; on a GPU it leaves
    out library calls (cuBLAS, cuDNN), so there they are no measure of the step's work. MFU is the
    model's matrix-product FLOPs per second (this process's batch, spread over its devices) over
    the peak of those devices (from `PEAK_TFLOPS` under the default matmul precision in force, or
    `peak_tflops`); None where the peak is unknown.
    """
    batch_size = self.workload.train_batch_size
    rates = [steps_per_window / s for s in window_seconds]
    steps_per_second = statistics.median(rates)
    model_flops = self.workload.forward_flops.train_step(batch_size, jax.local_device_count()) * steps_per_second
    device_kind = jax.local_devices()[0].device_kind
    peak = peak_tflops * 1e12 if peak_tflops else peak_flops(device_kind, self.workload.dtype,
                                                              jax.config.jax_default_matmul_precision)
    cost = self._step.cost_analysis() or {}
    return {
        'compile_seconds': self.compile_seconds,
        'steps_per_second': steps_per_second,
        'best_steps_per_second': max(rates),
        'window_steps_per_second': rates,
        'examples_per_second': steps_per_second * batch_size,
        'tokens_per_second': steps_per_second * batch_size * self.workload.tokens_per_example,
        'model_tflops_per_second': model_flops / 1e12,
        'mfu': model_flops / (peak * jax.local_device_count()) if peak else None,
        'compiled_bytes_per_device': _compiled_bytes(self._step),
        'xla_flops': cost.get('flops'),
        'xla_bytes_accessed': cost.get('bytes accessed'),
        'peak_bytes_in_use': peak_memory_bytes(),
        'first_step_loss': self.first_step_loss,
    }


def operation_times(run_window: Callable[[int], float], steps: int) -> dict[str, Any]:
  """Where XLA:CPU spends a step: thread seconds and calls per step by operation kind, from a profiler trace.

  XLA:CPU runs each compiled operation (named after its HLO instruction, e.g. `copy_bitcast_fusion.12`)
  on its threads, and `jax.profiler` records every run there; a kind is that name without its numeric
  suffix. Runtime internals (names with '::') and end markers are left out. Control flow (`while`,
  `cond`) also counts the operations it runs, so kinds can add up to more than the threads' time.
  `run_window(steps)` runs `steps` steps, synchronised, and returns their seconds.
  """
  if jax.default_backend() != 'cpu':
    raise ValueError(f'operation times read XLA:CPU threads; this backend is {jax.default_backend()}: open a '
                     'jax.profiler trace in XProf instead')
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir)
    try:
      seconds = run_window(steps)
    finally:
      jax.profiler.stop_trace()
    trace, = glob.glob(os.path.join(trace_dir, '**', '*.xplane.pb'), recursive=True)
    profile = jax.profiler.ProfileData.from_file(trace)
  spent, calls = collections.Counter(), collections.Counter()
  for plane in profile.planes:
    for line in plane.lines:
      if not line.name.startswith('tf_XLA'):  # XLA's own threads (not Python's).
        continue
      for event in line.events:
        if '::' in event.name or event.name.startswith('end: '):
          continue
        kind = re.sub(r'\.\d+$', '', event.name)
        spent[kind] += event.duration_ns
        calls[kind] += 1
  return {'steps': steps, 'step_seconds': seconds / steps,
          'kinds': [{'kind': kind, 'seconds_per_step': ns / 1e9 / steps, 'calls_per_step': calls[kind] / steps}
                    for kind, ns in spent.most_common()]}


def matmul_gflops(size: int = 2048, repeats: int = 7) -> float:
  """This host's float32 matrix-product throughput: the median of `repeats` [size, size] products."""
  a, b = (jax.random.normal(jax.random.PRNGKey(seed), (size, size), jnp.float32) for seed in (0, 1))
  product = jax.jit(jnp.dot)
  product(a, b).block_until_ready()
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    product(a, b).block_until_ready()
    seconds.append(time.perf_counter() - start)
  return 2 * size ** 3 / statistics.median(seconds) / 1e9


def print_now(line: str) -> None:
  """Prints `line` and flushes: progress a benchmark stopped by a timeout still shows."""
  print(line, flush=True)


def built_timers(builders: dict[str, Callable[[], Any]], report: Callable[[str], None] | None = None
                 ) -> dict[str, Any]:
  """Each builder's timer, by name, built (and so compiled) in turn; the seconds each took go to `report`, where
  given (`print_now`: a benchmark stopped by a timeout then says how far it got)."""
  timers = {}
  for name, build in builders.items():
    start = time.perf_counter()
    timers[name] = build()
    if report is not None:
      report(f'[{name}] built and compiled in {time.perf_counter() - start:.1f} s')
  return timers


def interleaved_windows(timers: dict[str, TrainStepTimer], *, windows: int, steps_per_window: int,
                        report: Callable[[str], None] | None = None) -> dict[str, list[float]]:
  """Window seconds per timer: a warm-up round, then `windows` rounds of one window each, in rotating order;
  each round's seconds per timer go to `report`, where given."""
  names = list(timers)
  seconds = {name: [] for name in names}
  for round_index in range(windows + 1):
    shift = round_index % len(names)
    elapsed = {}
    for name in names[shift:] + names[:shift]:
      elapsed[name] = timers[name].run_window(steps_per_window)
      if round_index:
        seconds[name].append(elapsed[name])
    if report is not None:
      report(f'round {round_index}/{windows}{" (warm-up)" if not round_index else ""}: '
             + ', '.join(f'{name} {1e3 * t / steps_per_window:.1f} ms/step' for name, t in elapsed.items()))
  return seconds


def measure_evaluation(workload: Workload, *, windows: int, steps_per_window: int) -> dict[str, Any]:
  """Median examples/s of the pmapped eval step at `evaluation.batch_size`."""
  batch_size = workload.task.settings.evaluation.batch_size
  batch = _on_devices(workload.batch(batch_size, np.random.default_rng(workload.seed)))
  params = replicate(jax.jit(workload.task.init_params)(jax.random.PRNGKey(workload.seed)))
  _, p_eval_step = pmapped_steps(workload.task)
  start = time.perf_counter()
  compiled = p_eval_step.lower(params, batch).compile()
  compile_seconds = time.perf_counter() - start

  def run_window():
    jax.block_until_ready([compiled(params, batch) for _ in range(steps_per_window)])

  seconds = timed_windows(run_window, windows)
  examples_per_second = statistics.median(steps_per_window * batch_size / s for s in seconds)
  return {'compile_seconds': compile_seconds, 'examples_per_second': examples_per_second,
          'tokens_per_second': examples_per_second * workload.tokens_per_example}


def pipeline_gap(config: ml_collections.ConfigDict, create_task: Callable[[ml_collections.ConfigDict, str], Task],
                 workdir: str, *, windows: int, steps_per_window: int) -> dict[str, Any]:
  """Steps/s of the real train loop (`trainer.train_and_evaluate`) against the same batches held on device.

  The task (`create_task` of `config`, its data in `workdir`) is set to log every `steps_per_window` steps;
  its real run stops, unevaluated, after a warm-up window and `windows` timed ones; its logged steps/s cover
  its whole loop (input pipeline, host-device transfer, metric bookkeeping). The synthetic side puts the very
  batches of those windows on the devices first, runs them all once (compiling every shape, as length
  buckets bring several), then times the same windows through the same step. Returns both medians, the
  relative gap, and how many batches per second the input pipeline alone makes (drawn on the host): the
  ceiling it puts on any device's steps/s.
  """
  steps = (windows + 1) * steps_per_window
  short_run = config.copy_and_resolve_references()
  short_run.training.update(log_every_steps=steps_per_window, num_train_steps=steps + 1)
  short_run.evaluation.every_steps = short_run.checkpoint.every_steps = steps + 1
  task = create_task(short_run, workdir)
  start = time.perf_counter()
  host_batches = [batch for _, batch in zip(range(steps), task.train_batches(0))]
  host_batches_per_second = steps / (time.perf_counter() - start)
  batches = list(device_batches(host_batches, size=2))
  state = replicate(create_state(task, jax.random.PRNGKey(task.settings.seed)))
  step_rng = replicate(jax.random.PRNGKey(task.settings.seed + 1))
  no_stop = stop_requests(False)
  p_train_step, _ = pmapped_steps(task)
  sums = zero_sums(task, state, batches[0], step_rng, no_stop)

  def run(window_batches) -> float:
    nonlocal state
    start = time.perf_counter()
    for batch in window_batches:
      state, window_sums = p_train_step(state, sums, batch, step_rng, no_stop)
    jax.block_until_ready((state, window_sums))
    return time.perf_counter() - start

  run(batches)
  synthetic_rates = [steps_per_window / run(batches[i * steps_per_window:(i + 1) * steps_per_window])
                     for i in range(1, windows + 1)]
  del state, batches
  run_dir = tempfile.mkdtemp(prefix='pipeline_run_', dir=workdir)  # Fresh: an old run would resume.
  trainer.train_and_evaluate(run_dir, task, should_stop=lambda step: step >= steps)
  real_rates = [r['steps_per_second'] for r in read_history(run_dir, 'train')][1:]  # The first window compiles.
  synthetic, real = statistics.median(synthetic_rates), statistics.median(real_rates)
  return {'synthetic_steps_per_second': synthetic, 'real_steps_per_second': real,
          'synthetic_window_steps_per_second': synthetic_rates, 'real_window_steps_per_second': real_rates,
          'gap': 1.0 - real / synthetic, 'host_batches_per_second': host_batches_per_second}
