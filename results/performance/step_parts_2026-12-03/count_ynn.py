"""The language model's train step in lm1b's form, compiled with each option of ynn_options_ab.py: how many
YNNPACK fusions it holds, by whether each fusion's computation has a dot or a reduce. From the repository root:

    python results/performance/step_parts_2026-12-03/count_ynn.py
"""
import importlib.util, re, jax
from lra_posenc import benchmarking
from lra_posenc.tasks import TASKS
from lra_posenc.training.steps import pmapped_steps
loader = importlib.util.spec_from_file_location('sbs', 'scripts/side_by_side_lm.py')
sbs = importlib.util.module_from_spec(loader); loader.loader.exec_module(sbs)
config = sbs.our_config('configs/lm/shakespeare_char.py', 'cpu', lm1b_form=True)
t = benchmarking.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
p, _ = pmapped_steps(t.workload.task)
low = p.lower(t._state, t._zero_sums, t._batch, t._rng, t._no_stop)
for opts in (None, {'xla_cpu_experimental_ynn_fusion_type': 'LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT'}, {'xla_cpu_experimental_ynn_fusion_type': ''}):
  text = low.compile(compiler_options=opts).as_text()
  comps = re.split(r'\n\n', text)
  ynn_comps = [c for c in comps if re.search(r'ynn|__ynn', c.split('\n')[0])]
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
