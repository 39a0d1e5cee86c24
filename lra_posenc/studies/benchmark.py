"""Speed of the trainer's steps per positional encoding; the input pipeline's cost; device scaling.

Every encoding at one setting, with step times as ratios to the first listed (`all` begins with
`none`; --reference picks another) for train, eval and, for translation, beam-search decoding;
compile time, memory, model TFLOP/s and MFU:
    python -m lra_posenc.studies.benchmark --task=listops --config=configs/listops/lra.py:cpu --encodings=all \\
        --out=runs/benchmark/listops_cpu.json
Any config key can be overridden, as in training (here the LRA shape in bfloat16):
    python -m lra_posenc.studies.benchmark --task=listops --config=configs/listops/lra.py \\
        --config.model.dtype=bfloat16 --encodings=none,rope
With --trace_dir=DIR, 20 more steps of each encoding are traced by jax.profiler into DIR/ENCODING.
The real input pipeline and train loop against the same batches held on device:
    python -m lra_posenc.studies.benchmark --task=listops --config=configs/listops/lra.py:cpu --pipeline \\
        --workdir=runs/benchmark/pipeline
Data parallelism over forced CPU devices (one process per count; without dropout the
first-step losses must agree, as the global batch is the same; each device draws its own
dropout masks):
    python -m lra_posenc.studies.benchmark --task=listops --config=configs/listops/lra.py:cpu --device_counts=1,2,4
Where XLA:CPU spends the train step, by operation kind (matrix products, copies, reductions...):
    python -m lra_posenc.studies.benchmark --task=translation --config=configs/translation/multi30k.py:tiny \\
        --config.training.max_tokens=0 --config.training.batch_size=128 --config.data.max_length=32 \\
        --profile_ops --steps_per_window=3 --out=runs/benchmark/profile_tiny.json
XLA's memory estimate of the compiled train step (compiled from shapes, nothing runs, so any
size fits) in float32 and bfloat16, with and without remat and attention dropout:
    python -m lra_posenc.studies.benchmark --task=listops --config=configs/listops/lra.py --memory_grid \\
        --out=results/performance/memory_listops_lra.json

Batches are synthetic unless --pipeline. Step-time ratios come three ways: from the median
window (the headline), from the best window (steadier on a shared host, where interference
only slows), and from XLA's bytes-accessed estimate of the compiled step (no timing noise).
MFU needs the device's peak (known GPUs, or --peak_tflops); it is left empty on CPUs.

Each figure is the median over timed windows after an untimed warm-up window, with the
device synchronised at every window's end, so asynchronous dispatch cannot flatter it.
Batches stay in device memory, so only model and optimizer are timed;
`pipeline_gap` compares that with the real input pipeline and train loop.
"""
import collections
import dataclasses
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from lra_posenc import encodings, tasks
from lra_posenc.data.files import written_whole
from lra_posenc.tasks import TaskSpec
from lra_posenc.training import cli, distributed, run_files, trainer
from lra_posenc.training.batches import Batch
from lra_posenc.training.distributed import device_batches, replicate, stop_requests
from lra_posenc.training.run_files import read_history
from lra_posenc.training.task import Task, Workload, timed_windows
from lra_posenc.training.trainer import create_state, pmapped_steps, zero_sums
from lra_posenc.validation import check_choice, comma_separated
# Dense peak TFLOP/s per device, by a substring of `device_kind` (first match wins) and the arithmetic its
# matrix products run in (`matmul_arithmetic`): bfloat16 and TF32 tensor cores, or full float32 (no tensor cores).
PEAK_TFLOPS = (
    ('H100 PCIe', {'bfloat16': 756.0, 'tf32': 378.0, 'float32': 51.2}),
    ('H100', {'bfloat16': 989.4, 'tf32': 494.7, 'float32': 66.9}),
    ('H200', {'bfloat16': 989.4, 'tf32': 494.7, 'float32': 66.9}),
    ('A100', {'bfloat16': 312.0, 'tf32': 156.0, 'float32': 19.5}),
)


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


FLAGS = flags.FLAGS
def define_flags() -> None:
  """The command line's flags: defined only when this module runs, so that importing it defines none."""
  config_flags.DEFINE_config_file('config', None, 'The task config, e.g. configs/listops/lra.py:cpu.')
  flags.DEFINE_string('task', None, "Which task the config belongs to; default: the config's `task`.")
  flags.DEFINE_string('encodings', '', "Comma-separated encodings, or 'all'; empty: the config's own.")
  flags.DEFINE_string('reference', '', 'The encoding whose step time the ratios divide by (one of --encodings); '
                      'empty: the first of them.')
  flags.DEFINE_integer('windows', 5, 'Timed windows (after one warm-up window); the median counts.', lower_bound=1)
  flags.DEFINE_integer('steps_per_window', 20, 'Steps per timed window.', lower_bound=1)
  flags.DEFINE_bool('eval', True, 'Also time the eval step.')
  flags.DEFINE_bool('decode', True, 'Also time beam-search decoding (translation).')
  flags.DEFINE_float('peak_tflops', None, "Peak TFLOP/s per device for MFU, where the device's is not known.")
  flags.DEFINE_bool('pipeline', False, 'Compare the real input pipeline and train loop with on-device batches.')
  flags.DEFINE_string('workdir', '', 'With --pipeline: data and the short real run go here.')
  flags.DEFINE_string('device_counts', '', 'Comma-separated forced CPU device counts to compare, one process each '
                      '(on the host CPU, also where an accelerator is present).')
  flags.DEFINE_bool('memory_grid', False, "XLA's memory estimate of the train step over dtype x remat x attention "
                    'dropout (the config\'s own rate, and 0), compiled without running.')
  flags.DEFINE_bool('profile_ops', False, "Where XLA:CPU spends the config's train step: thread time per step by "
                    'operation kind, traced over --steps_per_window steps.')
  flags.DEFINE_string('trace_dir', '', "After timing, trace --trace_steps more train steps of each encoding with "
                      "jax.profiler into TRACE_DIR/ENCODING (TensorBoard's profile plugin, Perfetto).")
  flags.DEFINE_integer('trace_steps', 20, 'Train steps each --trace_dir trace covers.')
  flags.DEFINE_string('out', '', 'Write the results here as JSON.')


def throughput(config: ml_collections.ConfigDict, encoding_names: list[str], reference: str) -> dict:
  """Train (and eval, decode) figures per encoding, with step-time ratios to `reference`'s.

  Train steps of all encodings are compiled first, then timed in interleaved windows.
  """
  workloads, timers = {}, {}
  for name in encoding_names:
    variant = config.copy_and_resolve_references()
    variant.model.pos_encoding = name
    workloads[name] = task_spec().benchmark_workload(variant)
    timers[name] = TrainStepTimer(workloads[name])
  seconds = interleaved_windows(timers, windows=FLAGS.windows, steps_per_window=FLAGS.steps_per_window)
  if FLAGS.trace_dir:
    for name, timer in timers.items():
      with jax.profiler.trace(os.path.join(FLAGS.trace_dir, name)):
        timer.run_window(FLAGS.trace_steps)
  results = {name: {'train': timers[name].summary(seconds[name], FLAGS.steps_per_window, FLAGS.peak_tflops),
                    'attention': {call: dataclasses.asdict(path)
                                  for call, path in workloads[name].task.attention_paths.items()}}
             for name in encoding_names}
  del timers
  for name, measured in results.items():
    timing = dict(windows=FLAGS.windows, steps_per_window=FLAGS.steps_per_window)
    if FLAGS.eval:
      measured['eval'] = measure_evaluation(workloads[name], **timing)
    if FLAGS.decode and workloads[name].decode:
      measured['decode'] = workloads[name].decode(FLAGS.windows)
  base = results[reference]['train']
  for measured in results.values():
    train = measured['train']
    measured['step_time_ratio'] = base['steps_per_second'] / train['steps_per_second']
    measured['best_step_time_ratio'] = base['best_steps_per_second'] / train['best_steps_per_second']
    measured['xla_bytes_ratio'] = _ratio(train['xla_bytes_accessed'], base['xla_bytes_accessed'])
    measured['xla_flops_ratio'] = _ratio(train['xla_flops'], base['xla_flops'])
  print_table(results, reference)
  return {'reference': reference, 'encodings': results}


def _ratio(value: float | None, reference: float | None) -> float | None:
  return value / reference if value and reference else None


def print_table(results: dict, reference: str) -> None:
  """One row per encoding; time ratios from the median and from the best window, and XLA's bytes ratio."""
  columns = ['encoding', 'compile s', 'steps/s', 'tokens/s', f'time/{reference}', 'best-window', 'XLA bytes',
             'TFLOP/s', 'MFU', 'MiB/device', 'eval ex/s', 'decode sent/s']
  rows = []
  for name, measured in results.items():
    train, evaluation, decode = measured['train'], measured.get('eval'), measured.get('decode')
    bytes_ratio = measured['xla_bytes_ratio']
    rows.append([name, f'{train["compile_seconds"]:.1f}', f'{train["steps_per_second"]:.2f}',
                 f'{train["tokens_per_second"]:.0f}', f'{measured["step_time_ratio"]:.3f}',
                 f'{measured["best_step_time_ratio"]:.3f}', '-' if bytes_ratio is None else f'{bytes_ratio:.3f}',
                 f'{train["model_tflops_per_second"]:.3f}', '-' if train['mfu'] is None else f'{train["mfu"]:.1%}',
                 f'{(train["peak_bytes_in_use"] or train["compiled_bytes_per_device"]) / 2**20:.0f}',
                 f'{evaluation["examples_per_second"]:.0f}' if evaluation else '-',
                 f'{decode["sentences_per_second"]:.1f}' if decode else '-'])
  widths = [max(len(str(row[i])) for row in rows + [columns]) for i in range(len(columns))]
  for row in [columns] + rows:
    print('  '.join(str(cell).rjust(width) for cell, width in zip(row, widths)))


def scaling(device_counts: list[int]) -> dict:
  """This script's throughput run once per forced CPU device count, in processes of their own.

  The runs are on the host's CPU whatever accelerator this process has, and the device fields
  returned (platform, device kind; devices per run) say so: they replace this process's own.
  """
  if jax.default_backend() != 'cpu':
    print(f'--device_counts times forced devices of the host CPU, not the {jax.local_devices()[0].device_kind}',
          flush=True)
  runs = {}
  forwarded = [a for a in sys.argv[1:] if not a.startswith(('--device_counts', '--out', '--encodings', '--reference'))]
  for count in device_counts:
    with tempfile.TemporaryDirectory() as scratch:
      out = os.path.join(scratch, 'run.json')
      env = distributed.with_xla_flags(os.environ, f'--xla_force_host_platform_device_count={count}') | {
          'JAX_PLATFORMS': 'cpu'}
      subprocess.run([sys.executable, '-m', __spec__.name, *forwarded, f'--encodings={_encodings()[0]}',
                      f'--out={out}'], env=env, check=True)
      with open(out) as f:
        run = json.load(f)
    runs[count] = next(iter(run['encodings'].values()))['train'] | {'local_devices': run['local_devices']}
    measured_on = {'platform': run['platform'], 'device_kind': run['device_kind']}
  base = runs[device_counts[0]]
  print(f'{"devices":>7} {"steps/s":>9} {"speed-up":>9} {"first-step loss":>16}')
  for count, train in runs.items():
    print(f'{count:>7} {train["steps_per_second"]:>9.2f} {train["steps_per_second"] / base["steps_per_second"]:>9.2f} '
          f'{train["first_step_loss"]:>16.7f}')
  return measured_on | {'device_counts': {str(k): v for k, v in runs.items()}}


# XLA:CPU's default scheduler trades memory for concurrency and hoists rematerialised forward passes
# early, so its estimate would not show what remat saves; the memory-minimising scheduler (what GPUs'
# memory-aware scheduling does) shows it.
MEMORY_SCHEDULER_FLAG = '--xla_cpu_enable_concurrency_optimized_scheduler=false'


def memory_grid(config: ml_collections.ConfigDict) -> dict:
  """`train_step_memory` for every dtype x remat x attention dropout, in GiB per device.

  On a CPU it runs in a process of its own with XLA's memory-minimising scheduler.
  """
  if jax.default_backend() == 'cpu' and MEMORY_SCHEDULER_FLAG not in os.environ.get('XLA_FLAGS', ''):
    with tempfile.TemporaryDirectory() as scratch:
      out = os.path.join(scratch, 'memory.json')
      env = distributed.with_xla_flags(os.environ, MEMORY_SCHEDULER_FLAG)
      forwarded = [a for a in sys.argv[1:] if not a.startswith('--out')]
      subprocess.run([sys.executable, '-m', __spec__.name, *forwarded, f'--out={out}'], env=env, check=True)
      with open(out) as f:
        return {'memory': json.load(f)['memory'], 'xla_flags': env['XLA_FLAGS']}
  rows = []
  for dtype in ('float32', 'bfloat16'):
    for remat in (False, True):
      for dropout in sorted({config.model.attention_dropout_rate, 0.0}, reverse=True):
        variant = config.copy_and_resolve_references()
        variant.model.update(dtype=dtype, remat=remat, attention_dropout_rate=dropout)
        memory = train_step_memory(task_spec().benchmark_workload(variant))
        rows.append({'dtype': dtype, 'remat': remat, 'attention_dropout_rate': dropout} | memory)
        print(f'{dtype:>9} remat={remat!s:5} attention dropout {dropout:.1f}: {memory["total_bytes"] / 2**30:7.2f} GiB '
              f'(temporaries {memory["temp_bytes"] / 2**30:.2f} GiB)', flush=True)
  return {'memory': rows}


def profile_ops(config: ml_collections.ConfigDict, shown: int = 20) -> dict:
  """`operation_times` of the config's train step after a warm-up window; prints the costliest kinds."""
  timer = TrainStepTimer(task_spec().benchmark_workload(config))
  timer.run_window(FLAGS.steps_per_window)
  profile = operation_times(timer.run_window, FLAGS.steps_per_window)
  print(f'{1e3 * profile["step_seconds"]:.1f} ms a step over {FLAGS.steps_per_window} steps; thread time by operation '
        'kind (while and cond include what they run):')
  for row in profile['kinds'][:shown]:
    print(f'{1e3 * row["seconds_per_step"]:9.1f} ms/step {row["calls_per_step"]:8.1f} calls/step  {row["kind"]}')
  return {'operation_times': profile}


def _encodings() -> list[str]:
  if FLAGS.encodings == 'all':
    return list(encodings.REGISTRY)
  names = [n for n in FLAGS.encodings.split(',') if n] or [FLAGS.config.model.pos_encoding]
  for name in names:
    check_choice('--encodings', name, encodings.REGISTRY)
  return names


def _reference(names: list[str]) -> str:
  if FLAGS.reference:
    check_choice('--reference', FLAGS.reference, names)
  return FLAGS.reference or names[0]


def task_spec() -> TaskSpec:
  """The config's task (`config.task`), which --task, where given, must name."""
  if FLAGS.task and FLAGS.task != FLAGS.config.task:
    raise app.UsageError(f'--task={FLAGS.task}, but the config is of task {FLAGS.config.task!r}')
  try:
    return tasks.find(FLAGS.config.task)
  except ValueError as error:
    raise app.UsageError(str(error)) from None


MODES = ('device_counts', 'memory_grid', 'profile_ops', 'pipeline')  # Else: the throughput table.


def main(argv: list[str]) -> None:
  del argv
  modes = [mode for mode in MODES if FLAGS[mode].value]
  if len(modes) > 1:
    raise app.UsageError(f'--{" and --".join(modes)}: one mode at a time')
  if FLAGS.encodings and modes and modes != ['device_counts']:
    raise app.UsageError(f'--{modes[0]} measures the config\'s own encoding: set --config.model.pos_encoding, '
                         'not --encodings')
  config = FLAGS.config
  device = jax.local_devices()[0]
  results = {'task': task_spec().name, 'device_kind': device.device_kind, 'platform': device.platform,
             'local_devices': jax.local_device_count(), 'host_cpu': run_files.host_cpu(), 'jax': jax.__version__,
             'model': config.model.to_dict(),
             'batch_size': {'train': config.training.batch_size, 'eval': config.evaluation.batch_size},
             'timing': {'windows': FLAGS.windows, 'steps_per_window': FLAGS.steps_per_window}}
  if FLAGS.device_counts:
    del results['local_devices']  # Each run's own count is in its entry.
    results |= scaling(comma_separated('--device_counts', FLAGS.device_counts, int, at_least=1))
  elif FLAGS.memory_grid:
    results |= memory_grid(config)
  elif FLAGS.profile_ops:
    results |= profile_ops(config)
  elif FLAGS.pipeline:
    if not FLAGS.workdir:
      raise app.UsageError('--pipeline needs --workdir (data and a short real run go there)')
    gap = pipeline_gap(config, task_spec().create_task, FLAGS.workdir, windows=FLAGS.windows,
                                    steps_per_window=FLAGS.steps_per_window)
    print(f'synthetic {gap["synthetic_steps_per_second"]:.2f} steps/s, real pipeline and loop '
          f'{gap["real_steps_per_second"]:.2f} steps/s: gap {gap["gap"]:.1%}; the input pipeline alone makes '
          f'{gap["host_batches_per_second"]:.0f} batches/s')
    results['pipeline'] = gap
  else:
    names = _encodings()
    results |= throughput(config, names, _reference(names))
  if FLAGS.out:
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
    with written_whole(FLAGS.out) as f:
      json.dump(results, f, indent=2)


if __name__ == '__main__':
  define_flags()
  flags.mark_flags_as_required(['config'])
  cli.run(main)
