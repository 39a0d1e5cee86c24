"""A/B in one process: the train step donating its state (`donate_argnums=(0,)`, as it does on an accelerator)
against not donating it (as it does on a CPU since 636fc1b, `training.steps.donated_arguments`). For each side it
prints the copies at the compiled step's entry (XLA:CPU copies every donated leaf there) and XLA's memory analysis,
then the median ms a step over interleaved windows of the trainer's step (`TrainStepTimer`) and the ratio
not donating / donating. From the repository root:

    .venv/bin/python -m benchmarks.state_donation_ab configs/lm/shakespeare_char.py:cpu data.text_file=unused \\
        --output=lm_cpu_ab.json
    .venv/bin/python -m benchmarks.state_donation_ab configs/listops/lra.py:cpu --output=listops_cpu_ab.json
    .venv/bin/python -m benchmarks.state_donation_ab side_by_side_wmt --output=wmt_default_d0_ab.json

`side_by_side_wmt` is scripts/side_by_side_wmt.py's default shape without dropout.
Backs PERFORMANCE.md's log entry "2026-12-02, the train step donates its state on an accelerator only" (636fc1b)
and the figures of 108 and 395 copies in `donated_arguments`' docstring (the records are in
results/performance/donation_2026-12-02/).
"""
import json
import os
import re
import statistics

import jax

from benchmarks import step_ab
from lra_posenc.studies import benchmark
from lra_posenc.tasks import TASKS
from lra_posenc.training import run_files, trainer

DONATED = trainer.donated_arguments


def build(config, donate: bool) -> benchmark.TrainStepTimer:
  """The train step compiled donating its state, or not (set only while it compiles)."""
  trainer.donated_arguments = lambda platform: (0,) if donate else ()
  try:
    return benchmark.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
  finally:
    trainer.donated_arguments = DONATED


def compiled_facts(timer: benchmark.TrainStepTimer) -> dict:
  """Copies in the compiled step's entry computation, and XLA's memory analysis in bytes."""
  text = timer._step.as_text()
  memory = timer._step.memory_analysis()
  return {'entry_copies': len(re.findall(r' copy\(', text[text.index('ENTRY'):])),
          'argument_bytes': memory.argument_size_in_bytes, 'output_bytes': memory.output_size_in_bytes,
          'alias_bytes': memory.alias_size_in_bytes, 'temp_bytes': memory.temp_size_in_bytes}


def main(argv: list[str] | None = None) -> dict:
  args = step_ab.parse_args(__doc__, argv, windows=10)
  config = step_ab.read_config(args.config, args.overrides)
  timers = benchmark.built_timers({'donating': lambda: build(config, True),
                                   'not_donating': lambda: build(config, False)}, report=benchmark.print_now)
  compiled = {name: compiled_facts(timer) for name, timer in timers.items()}
  print(json.dumps(compiled, indent=1), flush=True)
  seconds = benchmark.interleaved_windows(timers, windows=args.windows, steps_per_window=args.steps_per_window)
  ms = {name: 1e3 * statistics.median(s) / args.steps_per_window for name, s in seconds.items()}
  result = {'config': args.config, 'overrides': args.overrides, 'cpu': run_files.describe_cpu(run_files.host_cpu()),
            'jax': jax.__version__, 'xla_flags': os.environ.get('XLA_FLAGS', ''), 'compiled': compiled,
            'ms_per_step': ms, 'not_donating_over_donating': ms['not_donating'] / ms['donating'],
            'window_seconds': seconds}
  print(json.dumps({k: result[k] for k in ('config', 'cpu', 'ms_per_step', 'not_donating_over_donating')}, indent=1))
  with open(args.output, 'w') as f:
    json.dump(result, f, indent=1)
  return result


if __name__ == '__main__':
  main()
