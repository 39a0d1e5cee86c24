"""A/B in one process: the train step compiled with XLA:CPU's default YNNPACK fusions, with YNNPACK's products only
(no YNNPACK reductions) and with no YNNPACK fusion, each option set per program through
`Lowered.compile(compiler_options=...)`, so all three run in one process, unlike XLA_FLAGS. For each it prints how
many YNNPACK fusions the compiled step holds, by whether a fusion's computation has a dot or a reduce; then each
one's median ms a step over interleaved windows of the trainer's step (`TrainStepTimer`) and its ratio to the
default. From the repository root:

    .venv/bin/python -m benchmarks.ynn_options_ab lm1b --output=ynn_options_lm1b.json
    .venv/bin/python -m benchmarks.ynn_options_ab nanogpt --output=ynn_options_nanogpt.json
    .venv/bin/python -m benchmarks.ynn_options_ab configs/listops/lra.py:cpu --output=ynn_options_listops.json

`lm1b` and `nanogpt`: the language model's `:cpu` recipe in that peer's form, as scripts/side_by_side_lm.py builds
it (`nanogpt` is the form the trainer runs). Backs PERFORMANCE.md's "The leads left against lm1b, measured after
af288e5" (the YNNPACK fusion counts and times; no XLA flag adopted; the records are in
results/performance/step_parts_2026-12-03/).
"""
import argparse
import importlib.util
import json
import os
import re
import statistics

import jax

from lra_posenc.config_files import config_of_flags
from lra_posenc.studies import benchmark
from lra_posenc.tasks import TASKS
from lra_posenc.training import run_files
from lra_posenc.training.trainer import pmapped_steps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_FORMS = ('lm1b', 'nanogpt')
OPTION = 'xla_cpu_experimental_ynn_fusion_type'
OPTIONS = {'default': None, 'no_ynn_reduce': {OPTION: 'LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT'}, 'no_ynn': {OPTION: ''}}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('config', help="'lm1b', 'nanogpt' (the LM :cpu recipe in that form), or CONFIG[:ARG].")
  parser.add_argument('overrides', nargs='*', metavar='KEY=VALUE',
                      help='Overrides of CONFIG[:ARG] (as --config.KEY=VALUE).')
  parser.add_argument('--output', required=True, help='Write the figures to this JSON file.')
  parser.add_argument('--windows', type=int, default=8, help='Timed windows per option.')
  parser.add_argument('--steps_per_window', type=int, default=5)
  args = parser.parse_args(argv)
  if args.overrides and args.config in PEER_FORMS:
    parser.error(f'{args.config} is a fixed recipe: overrides apply to a CONFIG[:ARG] only')
  return args


def read_config(spec: str, overrides: list[str]):
  """The config to time: the LM `:cpu` recipe in a peer's form, or a config file with overrides."""
  if spec not in PEER_FORMS:
    return config_of_flags([f'--config={spec}', *(f'--config.{item}' for item in overrides)])
  script = os.path.join(ROOT, 'scripts', 'side_by_side_lm.py')
  loader = importlib.util.spec_from_file_location('side_by_side_lm', script)
  module = importlib.util.module_from_spec(loader)
  loader.loader.exec_module(module)
  return module.our_config(os.path.join(ROOT, 'configs', 'lm', 'shakespeare_char.py'), 'cpu', lm1b_form=spec == 'lm1b')


def build(config, options: dict | None) -> benchmark.TrainStepTimer:
  """The train step, recompiled with `options` where given, one step run."""
  timer = benchmark.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
  if options:
    arguments = (timer._state, timer._zero_sums, timer._batch, timer._rng, timer._no_stop)
    p_train_step, _ = pmapped_steps(timer.workload.task)
    timer._step = p_train_step.lower(*arguments).compile(compiler_options=options)
    timer._state, _ = timer._step(*arguments)
  return timer


def ynn_fusions(compiled) -> dict[str, int]:
  """The compiled program's YNNPACK (custom) fusions, by whether their computation holds a dot, else a reduce."""
  text = compiled.as_text()
  bodies = {}
  for computation in text.split('\n\n'):
    name = re.match(r'%?(\S+) ', computation.strip())
    if name:
      bodies[name.group(1)] = computation
  kinds = {'dot': 0, 'reduce': 0, 'other': 0}
  for called in re.findall(r'kind=kCustom, calls=%(\S+?)[,}]', text):
    body = bodies.get(called, '')
    kinds['dot' if ' dot(' in body else 'reduce' if ' reduce(' in body else 'other'] += 1
  return kinds


def main(argv: list[str] | None = None) -> dict:
  args = parse_args(argv)
  config = read_config(args.config, args.overrides)
  timers = benchmark.built_timers({name: lambda o=options: build(config, o) for name, options in OPTIONS.items()},
                                  report=benchmark.print_now)
  fusions = {name: ynn_fusions(timer._step) for name, timer in timers.items()}
  for name, kinds in fusions.items():
    print(f'{name}: {sum(kinds.values())} YNNPACK fusions {kinds}', flush=True)
  seconds = benchmark.interleaved_windows(timers, windows=args.windows, steps_per_window=args.steps_per_window)
  ms = {name: 1e3 * statistics.median(s) / args.steps_per_window for name, s in seconds.items()}
  result = {'config': args.config, 'sets': args.overrides, 'ms_per_step': ms,
            'ratio_to_default': {name: value / ms['default'] for name, value in ms.items()}, 'ynn_fusions': fusions,
            'options': OPTIONS, 'cpu': run_files.host_cpu(), 'jax': jax.__version__,
            'xla_flags': os.environ.get('XLA_FLAGS', ''), 'windows_seconds': seconds}
  print(json.dumps({k: result[k] for k in ('config', 'ms_per_step', 'ratio_to_default')}, indent=1))
  with open(args.output, 'w') as f:
    json.dump(result, f, indent=1)
  return result


if __name__ == '__main__':
  main()
