"""A/B in one process: a task's train step with the projections' products as `models.dense` writes their gradients
against JAX's own (`lax.dot_general`), the trainer's step (`benchmarking.TrainStepTimer`), interleaved windows.

    python dense_ab.py CONFIG[:ARG] [KEY=VALUE ...] --output=FILE
    python dense_ab.py side_by_side_wmt --output=FILE   # scripts/side_by_side_wmt.py's default shape, no dropout
"""
import argparse, json, statistics, sys
from jax import lax
from lra_posenc import benchmarking
from lra_posenc.config_files import config_of_flags
from lra_posenc.models import attention, transformer
from lra_posenc.tasks import TASKS
from lra_posenc.training import provenance

spec, *sets = [a for a in sys.argv[1:] if not a.startswith('--output=')]
output = next(a.split('=', 1)[1] for a in sys.argv[1:] if a.startswith('--output='))


def timer():
  if spec == 'side_by_side_wmt':
    import importlib.util, os
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'scripts', 'side_by_side_wmt.py')
    loader = importlib.util.spec_from_file_location('side_by_side_wmt', script)
    module = importlib.util.module_from_spec(loader); loader.loader.exec_module(module)
    args = argparse.Namespace(layers=3, dim=256, heads=4, mlp=1024, batch=32, length=32, vocab=8000, dropout=0.0,
                              dtype='float32', encoding='sinusoidal')  # Its defaults, dropout 0.
    config = module.our_config(args)
    return benchmarking.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
  config = config_of_flags([f'--config={spec}', *(f'--config.{item}' for item in sets)])
  return benchmarking.TrainStepTimer(TASKS[config.task].benchmark_workload(config))

products = transformer.dense_dot_general, attention.dense_dot_general
timers = {'dense_products': timer()}
transformer.dense_dot_general = attention.dense_dot_general = lax.dot_general
timers['jax_gradients'] = timer()
transformer.dense_dot_general, attention.dense_dot_general = products
losses = {name: float(t.first_step_loss) for name, t in timers.items()}
seconds = benchmarking.interleaved_windows(timers, windows=8, steps_per_window=5)
ms = {name: 1e3 * statistics.median(s) / 5 for name, s in seconds.items()}
result = {'config': spec, 'sets': sets, 'first_step_loss': losses, 'ms_per_step': ms,
          'ratio': ms['dense_products'] / ms['jax_gradients'], 'cpu': provenance.host_cpu(),
          'windows_seconds': seconds}
print(json.dumps({k: result[k] for k in ('config', 'first_step_loss', 'ms_per_step', 'ratio', 'cpu')}, indent=1))
json.dump(result, open(output, 'w'), indent=1)
