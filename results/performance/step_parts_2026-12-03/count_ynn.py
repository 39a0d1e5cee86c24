"""The language model's train step in lm1b's form, compiled with each option of ynn_options_ab.py: how many
YNNPACK fusions it holds, by whether each fusion's computation has a dot or a reduce. From the repository root:

    python results/performance/step_parts_2026-12-03/count_ynn.py
"""
import re
from step_config import step_config
from lra_posenc import benchmarking
from lra_posenc.tasks import TASKS
from lra_posenc.training.steps import pmapped_steps
config = step_config('lm1b', [])
t = benchmarking.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
p, _ = pmapped_steps(t.workload.task)
low = p.lower(t._state, t._zero_sums, t._batch, t._rng, t._no_stop)
for opts in (None, {'xla_cpu_experimental_ynn_fusion_type': 'LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT'}, {'xla_cpu_experimental_ynn_fusion_type': ''}):
  text = low.compile(compiler_options=opts).as_text()
  comps = re.split(r'\n\n', text)
  calls = re.findall(r'kind=kCustom, calls=%(\S+?)[,}]', text)
  called = {}
  for c in comps:
    m = re.match(r'%?(\S+) ', c.strip())
    if m: called[m.group(1)] = c
  kinds = {'dot': 0, 'reduce': 0, 'other': 0}
  for name in calls:
    body = called.get(name, '')
    kinds['dot' if ' dot(' in body else 'reduce' if ' reduce(' in body else 'other'] += 1
  print(opts, 'custom fusions:', len(calls), kinds)
