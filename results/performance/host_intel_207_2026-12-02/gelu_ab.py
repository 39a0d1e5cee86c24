"""A/B of the MLP activation without biases (our LM :cpu step), one process, interleaved windows."""
import functools, json, statistics, sys
import flax.linen as nn
import jax
from lra_posenc import benchmarking
from lra_posenc.config_files import load_config
from lra_posenc.models import transformer
from lra_posenc.tasks import TASKS
transformer.ACTIVATIONS['gelu_exact'] = functools.partial(nn.gelu, approximate=False)
transformer.ACTIVATIONS['gelu_tanh_barrier'] = lambda x: nn.gelu(jax.lax.optimization_barrier(x))
def config(activation, bias):
  c = load_config('configs/lm/shakespeare_char.py', 'cpu'); c.data.text_file = 'unused'
  c.model.update(activation=activation, use_bias=bias); return c
forms = {'gelu_tanh': config('gelu', False), 'gelu_exact': config('gelu_exact', False),
         'gelu_tanh_barrier': config('gelu_tanh_barrier', False), 'relu': config('relu', False)}
timers = {n: benchmarking.TrainStepTimer(TASKS[c.task].benchmark_workload(c)) for n, c in forms.items()}
seconds = benchmarking.interleaved_windows(timers, windows=8, steps_per_window=5)
out = {n: 1e3 * statistics.median(s) / 5 for n, s in seconds.items()}
print(json.dumps(out, indent=1)); json.dump(out, open(sys.argv[1], 'w'), indent=1)
