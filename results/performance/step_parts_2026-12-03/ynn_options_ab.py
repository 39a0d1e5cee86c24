"""A/B in one process: the language model's `:cpu` train step compiled with XLA:CPU's default YNNPACK fusions,
with YNNPACK's products only (no YNNPACK reductions), and with no YNNPACK fusion, each set per program through
`Lowered.compile(compiler_options=...)`; 8 interleaved windows of 5 steps. From the repository root:

    python results/performance/step_parts_2026-12-03/ynn_options_ab.py lm1b|nanogpt|CONFIG[:ARG] OUTPUT.json [--config.KEY=VALUE ...]
"""
import json, statistics, sys
from step_config import step_config
from lra_posenc import benchmarking
from lra_posenc.tasks import TASKS
from lra_posenc.training import provenance
from lra_posenc.training.steps import pmapped_steps
config = step_config(sys.argv[1], sys.argv[3:])


options = {'default': None, 'no_ynn_reduce': {'xla_cpu_experimental_ynn_fusion_type': 'LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT'},
           'no_ynn': {'xla_cpu_experimental_ynn_fusion_type': ''}}


def build(opts):
  timer = benchmarking.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
  if opts:
    p_train_step, _ = pmapped_steps(timer.workload.task)
    timer._step = p_train_step.lower(timer._state, timer._zero_sums, timer._batch, timer._rng,
                                     timer._no_stop).compile(compiler_options=opts)
    timer._step(timer._state, timer._zero_sums, timer._batch, timer._rng, timer._no_stop)
  return timer


timers = {name: build(o) for name, o in options.items()}
seconds = benchmarking.interleaved_windows(timers, windows=8, steps_per_window=5)
ms = {name: 1e3 * statistics.median(s) / 5 for name, s in seconds.items()}
result = {'config': sys.argv[1], 'ms_per_step': ms, 'ratio_to_default': {k: v / ms['default'] for k, v in ms.items()},
          'options': options, 'cpu': provenance.host_cpu(), 'windows_seconds': seconds}
print(json.dumps({k: result[k] for k in ('config', 'ms_per_step', 'ratio_to_default')}, indent=1))
json.dump(result, open(sys.argv[2], 'w'), indent=1)
