"""A/B: the LM :cpu step without biases, GELU as is vs GELU whose input gradient is materialised (barrier)."""
import json, statistics, sys
import flax.linen as nn
import jax
from lra_posenc import benchmarking
from lra_posenc.config_files import load_config
from lra_posenc.models import transformer
from lra_posenc.tasks import TASKS

@jax.custom_vjp
def gelu_materialised(x):
  return nn.gelu(x)
def _fwd(x):
  return jax.vjp(nn.gelu, x)
def _bwd(vjp, g):
  (dx,) = vjp(g)
  return (jax.lax.optimization_barrier(dx),)
gelu_materialised.defvjp(_fwd, _bwd)
transformer.ACTIVATIONS['gelu_materialised'] = gelu_materialised
def config(activation, bias):
  c = load_config('configs/lm/shakespeare_char.py', 'cpu'); c.data.text_file = 'unused'
  c.model.update(activation=activation, use_bias=bias); return c
forms = {'gelu': config('gelu', False), 'gelu_materialised': config('gelu_materialised', False),
         'gelu_bias': config('gelu', True)}
timers = {n: benchmarking.TrainStepTimer(TASKS[c.task].benchmark_workload(c)) for n, c in forms.items()}
print({n: t.first_step_loss for n, t in timers.items()})
seconds = benchmarking.interleaved_windows(timers, windows=8, steps_per_window=5)
out = {n: 1e3 * statistics.median(s) / 5 for n, s in seconds.items()}
print(json.dumps(out, indent=1)); json.dump(out, open(sys.argv[1], 'w'), indent=1)
