"""A/B in one process: the train step of CONFIG donating its state, and not: python donation_ab.py CONFIG:VARIANT TASK OUT [section.key=value...]"""
import functools, json, statistics, sys
import jax
from lra_posenc import benchmarking
from lra_posenc.config_files import load_config
from lra_posenc.tasks import TASKS
from lra_posenc.training import steps, provenance
path, variant = sys.argv[1].split(':')
config = load_config(path, variant)
for item in sys.argv[4:]:
  key, value = item.split('=')
  section, name = key.split('.')
  config[section][name] = type(config[section][name])(value)
def pmapped(donate):
  def make(task):
    return (jax.pmap(functools.partial(steps.accumulating_train_step, task=task), axis_name=steps.AXIS,
                     donate_argnums=(0,) if donate else ()),
            jax.pmap(functools.partial(steps.eval_step, task=task), axis_name=steps.AXIS))
  return make
timers = {}
for name, donate in (('donating', True), ('not_donating', False)):
  benchmarking.pmapped_steps = pmapped(donate)
  timers[name] = benchmarking.TrainStepTimer(TASKS[sys.argv[2]].benchmark_workload(config))
windows, steps_per_window = 10, 5
seconds = benchmarking.interleaved_windows(timers, windows=windows, steps_per_window=steps_per_window)
ms = {n: 1e3 * statistics.median(s) / steps_per_window for n, s in seconds.items()}
out = {'config': sys.argv[1], 'overrides': sys.argv[4:], 'cpu': provenance.describe_cpu(provenance.host_cpu()),
       'jax': jax.__version__, 'ms_per_step': ms, 'not_donating_over_donating': ms['not_donating'] / ms['donating'],
       'window_seconds': seconds}
print(json.dumps({k: out[k] for k in ('config', 'cpu', 'ms_per_step', 'not_donating_over_donating')}))
json.dump(out, open(sys.argv[3], 'w'), indent=1)
