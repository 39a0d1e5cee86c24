"""Entry copies of a task config's train step, donated or not: python cost_task.py CONFIG TASK [key=value...]"""
import collections, functools, re, sys
import jax
from lra_posenc import benchmarking
from lra_posenc.config_files import load_config
from lra_posenc.tasks import TASKS
from lra_posenc.training import steps
path, variant = sys.argv[1].split(':')
config = load_config(path, variant)
for item in sys.argv[3:]:
  key, value = item.split('=')
  section, name = key.split('.')
  config[section][name] = type(config[section][name])(value)
def no_donate(task):
  return (jax.pmap(functools.partial(steps.accumulating_train_step, task=task), axis_name=steps.AXIS),
          jax.pmap(functools.partial(steps.eval_step, task=task), axis_name=steps.AXIS))
for donate in (True, False):
  benchmarking.pmapped_steps = steps.pmapped_steps if donate else no_donate
  timer = benchmarking.TrainStepTimer(TASKS[sys.argv[2]].benchmark_workload(config))
  text = timer._step.as_text()
  entry = text[text.index('ENTRY'):]
  cost = timer._step.cost_analysis()
  print('donate' if donate else 'no donation', 'entry copies', len(re.findall(r' copy\(', entry)),
        'of arguments', len(re.findall(r' copy\(%flat_args', entry)), 'bytes', cost.get('bytes accessed'))
  m = timer._step.memory_analysis()
  print('  argument', m.argument_size_in_bytes, 'output', m.output_size_in_bytes, 'alias', m.alias_size_in_bytes, 'temp', m.temp_size_in_bytes)
