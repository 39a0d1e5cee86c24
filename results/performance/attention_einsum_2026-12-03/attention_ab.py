"""A/B in one process: a task's train step with attention on XLA as `models.attention.attend` computes it (the
weights formed explicitly, then an einsum) against `jax.nn.dot_product_attention(implementation='xla')`, as it was
computed before, where there is no attention dropout; the trainer's step (`benchmarking.TrainStepTimer`), 8
interleaved windows of 5 steps. From the repository root:

    python results/performance/attention_einsum_2026-12-03/attention_ab.py CONFIG[:ARG] [KEY=VALUE ...] --output=FILE
    python .../attention_ab.py side_by_side_wmt --output=FILE   # scripts/side_by_side_wmt.py's default, no dropout
"""
import argparse, importlib.util, json, os, statistics, sys
import jax
import numpy as np
from lra_posenc import benchmarking
from lra_posenc.config_files import config_of_flags
from lra_posenc.models import attention
from lra_posenc.tasks import TASKS
from lra_posenc.training import provenance

spec, *sets = [a for a in sys.argv[1:] if not a.startswith('--output=')]
output = next(a.split('=', 1)[1] for a in sys.argv[1:] if a.startswith('--output='))


def timer():
  if spec == 'side_by_side_wmt':
    loader = importlib.util.spec_from_file_location('side_by_side_wmt', 'scripts/side_by_side_wmt.py')
    module = importlib.util.module_from_spec(loader); loader.loader.exec_module(module)
    args = argparse.Namespace(layers=3, dim=256, heads=4, mlp=1024, batch=32, length=32, vocab=8000, dropout=0.0,
                              dtype='float32', encoding='sinusoidal')  # Its defaults, dropout 0.
    config = module.our_config(args)
  else:
    config = config_of_flags([f'--config={spec}', *(f'--config.{item}' for item in sets)])
  return benchmarking.TrainStepTimer(TASKS[config.task].benchmark_workload(config))


explicit = attention.attend


def through_jax(query, key, value, *, bias, key_valid, causal=False, implementation='xla', dropout_rate=0.0,
                dropout_rng=None):
  if implementation != 'xla' or (dropout_rng is not None and dropout_rate > 0.0):
    return explicit(query, key, value, bias=bias, key_valid=key_valid, causal=causal, implementation=implementation,
                    dropout_rate=dropout_rate, dropout_rng=dropout_rng)
  if bias is not None and bias.shape[0] != query.shape[0]:
    bias = attention.broadcast_over_batch(bias, query.shape[0])
  mask = attention.attention_mask(key_valid, causal=causal, query_length=query.shape[1])
  return jax.nn.dot_product_attention(query, key, value, bias=bias, mask=mask, implementation='xla')


timers = {'explicit': timer()}
attention.attend = through_jax
timers['jax_dot_product_attention'] = timer()
attention.attend = explicit
losses = {name: float(t.first_step_loss) for name, t in timers.items()}
seconds = benchmarking.interleaved_windows(timers, windows=8, steps_per_window=5)
ms = {name: 1e3 * statistics.median(s) / 5 for name, s in seconds.items()}
# Both sides took the same steps on the same batch (1 + 9 windows of 5): their parameters' absolute sums.
abs_sums = {name: float(sum(np.abs(np.asarray(leaf, np.float64)).sum() for leaf in jax.tree.leaves(t._state.params)))
            for name, t in timers.items()}
result = {'params_abs_sum_after_46_steps': abs_sums, 'config': spec, 'sets': sets, 'first_step_loss': losses, 'ms_per_step': ms,
          'ratio': ms['explicit'] / ms['jax_dot_product_attention'], 'cpu': provenance.host_cpu(),
          'xla_flags': os.environ.get('XLA_FLAGS', ''), 'windows_seconds': seconds}
print(json.dumps({k: result[k] for k in ('config', 'first_step_loss', 'ms_per_step', 'ratio', 'params_abs_sum_after_46_steps')}, indent=1))
json.dump(result, open(output, 'w'), indent=1)
