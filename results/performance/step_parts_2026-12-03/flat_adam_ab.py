"""A/B in one process: the train step with AdamW over the parameter tree (as the trainer has it) against AdamW over
one flat vector of every parameter (`optax.flatten`; measurement only: weight decay here reaches every parameter);
8 interleaved windows of 5 steps. From the repository root:

    python results/performance/step_parts_2026-12-03/flat_adam_ab.py lm1b|nanogpt|CONFIG[:ARG] OUTPUT.json [--config.KEY=VALUE ...]
"""
import json, statistics, sys
import optax
from step_config import step_config
from lra_posenc import benchmarking
from lra_posenc.tasks import TASKS
from lra_posenc.training import optim, provenance
config = step_config(sys.argv[1], sys.argv[3:])


original = optim.create_optimizer


def flat(settings, num_train_steps):
  adamw = optax.adamw(optim.learning_rate_schedule(settings, num_train_steps), b1=settings.b1, b2=settings.b2,
                      eps=settings.eps, weight_decay=settings.weight_decay)
  if settings.grad_clip_norm:
    adamw = optax.chain(optax.clip_by_global_norm(settings.grad_clip_norm), adamw)
  return optax.flatten(adamw)


def build(create):
  optim.create_optimizer = create
  try:
    return benchmarking.TrainStepTimer(TASKS[config.task].benchmark_workload(config))
  finally:
    optim.create_optimizer = original


timers = {'tree': build(original), 'flat': build(flat)}
seconds = benchmarking.interleaved_windows(timers, windows=8, steps_per_window=5)
ms = {name: 1e3 * statistics.median(s) / 5 for name, s in seconds.items()}
result = {'config': sys.argv[1], 'sets': sys.argv[3:], 'ms_per_step': ms, 'ratio': ms['flat'] / ms['tree'],
          'first_step_loss': {k: t.first_step_loss for k, t in timers.items()}, 'cpu': provenance.host_cpu(),
          'windows_seconds': seconds}
print(json.dumps({k: result[k] for k in ('config', 'ms_per_step', 'ratio', 'first_step_loss')}, indent=1))
json.dump(result, open(sys.argv[2], 'w'), indent=1)
