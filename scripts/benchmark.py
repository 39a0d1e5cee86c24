#!/usr/bin/env python3
"""Speed of the trainer's steps per positional encoding; the input pipeline's cost; device scaling.

Every encoding at one setting, with step times as ratios to the first listed (`all` begins with
`none`; --reference picks another) for train, eval and, for translation, beam-search decoding;
compile time, memory, model TFLOP/s and MFU:
    python scripts/benchmark.py --task=listops --config=configs/listops/lra.py:cpu --encodings=all \\
        --out=runs/benchmark/listops_cpu.json
Any config key can be overridden, as in training (here the LRA shape in bfloat16):
    python scripts/benchmark.py --task=listops --config=configs/listops/lra.py \\
        --config.model.dtype=bfloat16 --encodings=none,rope
With --trace_dir=DIR, 20 more steps of each encoding are traced by jax.profiler into DIR/ENCODING.
The real input pipeline and train loop against the same batches held on device:
    python scripts/benchmark.py --task=listops --config=configs/listops/lra.py:cpu --pipeline \\
        --workdir=runs/benchmark/pipeline
Data parallelism over forced CPU devices (one process per count; without dropout the
first-step losses must agree, as the global batch is the same; each device draws its own
dropout masks):
    python scripts/benchmark.py --task=listops --config=configs/listops/lra.py:cpu --device_counts=1,2,4
Where XLA:CPU spends the train step, by operation kind (matrix products, copies, reductions...):
    python scripts/benchmark.py --task=translation --config=configs/translation/multi30k.py:tiny \\
        --config.training.max_tokens=0 --config.training.batch_size=128 --config.data.max_length=32 \\
        --profile_ops --steps_per_window=3 --out=runs/benchmark/profile_tiny.json
XLA's memory estimate of the compiled train step (compiled from shapes, nothing runs, so any
size fits) in float32 and bfloat16, with and without remat and attention dropout:
    python scripts/benchmark.py --task=listops --config=configs/listops/lra.py --memory_grid \\
        --out=results/performance/memory_listops_lra.json

Batches are synthetic unless --pipeline. Step-time ratios come three ways: from the median
window (the headline), from the best window (steadier on a shared host, where interference
only slows), and from XLA's bytes-accessed estimate of the compiled step (no timing noise).
MFU needs the device's peak (known GPUs, or --peak_tflops); it is left empty on CPUs.
"""
import dataclasses
import json
import os
import subprocess
import sys
import tempfile

import jax
import ml_collections
from absl import app, flags
from ml_collections import config_flags

from lra_posenc import benchmarking, encodings
from lra_posenc.data.files import written_whole
from lra_posenc.tasks import TASKS, TaskSpec
from lra_posenc.training import cli, distributed, provenance
from lra_posenc.validation import check_choice, comma_separated

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file('config', None, 'The task config, e.g. configs/listops/lra.py:cpu.')
flags.DEFINE_enum('task', None, sorted(TASKS), "Which task the config belongs to; default: the config's `task`.")
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
    timers[name] = benchmarking.TrainStepTimer(workloads[name])
  seconds = benchmarking.interleaved_windows(timers, windows=FLAGS.windows, steps_per_window=FLAGS.steps_per_window)
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
      measured['eval'] = benchmarking.measure_evaluation(workloads[name], **timing)
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
      subprocess.run([sys.executable, os.path.abspath(__file__), *forwarded, f'--encodings={_encodings()[0]}',
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
  """`benchmarking.train_step_memory` for every dtype x remat x attention dropout, in GiB per device.

  On a CPU it runs in a process of its own with XLA's memory-minimising scheduler.
  """
  if jax.default_backend() == 'cpu' and MEMORY_SCHEDULER_FLAG not in os.environ.get('XLA_FLAGS', ''):
    with tempfile.TemporaryDirectory() as scratch:
      out = os.path.join(scratch, 'memory.json')
      env = distributed.with_xla_flags(os.environ, MEMORY_SCHEDULER_FLAG)
      forwarded = [a for a in sys.argv[1:] if not a.startswith('--out')]
      subprocess.run([sys.executable, os.path.abspath(__file__), *forwarded, f'--out={out}'], env=env, check=True)
      with open(out) as f:
        return {'memory': json.load(f)['memory'], 'xla_flags': env['XLA_FLAGS']}
  rows = []
  for dtype in ('float32', 'bfloat16'):
    for remat in (False, True):
      for dropout in sorted({config.model.attention_dropout_rate, 0.0}, reverse=True):
        variant = config.copy_and_resolve_references()
        variant.model.update(dtype=dtype, remat=remat, attention_dropout_rate=dropout)
        memory = benchmarking.train_step_memory(task_spec().benchmark_workload(variant))
        rows.append({'dtype': dtype, 'remat': remat, 'attention_dropout_rate': dropout} | memory)
        print(f'{dtype:>9} remat={remat!s:5} attention dropout {dropout:.1f}: {memory["total_bytes"] / 2**30:7.2f} GiB '
              f'(temporaries {memory["temp_bytes"] / 2**30:.2f} GiB)', flush=True)
  return {'memory': rows}


def profile_ops(config: ml_collections.ConfigDict, shown: int = 20) -> dict:
  """`benchmarking.operation_times` of the config's train step after a warm-up window; prints the costliest kinds."""
  timer = benchmarking.TrainStepTimer(task_spec().benchmark_workload(config))
  timer.run_window(FLAGS.steps_per_window)
  profile = benchmarking.operation_times(timer.run_window, FLAGS.steps_per_window)
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
  return TASKS[FLAGS.config.task]


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
             'local_devices': jax.local_device_count(), 'host_cpu': provenance.host_cpu(), 'jax': jax.__version__,
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
    gap = benchmarking.pipeline_gap(config, task_spec().create_task, FLAGS.workdir, windows=FLAGS.windows,
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
  flags.mark_flags_as_required(['config'])
  cli.run(main)
