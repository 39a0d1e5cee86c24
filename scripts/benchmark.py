"""Train-step throughput of ListOps models, per positional encoding, with the trainer's own pmapped step.

    python scripts/benchmark.py --config=configs/listops/lra.py:cpu --encodings=none,sinusoidal,rope \\
        --windows=5 --steps_per_window=20 --out=benchmark.json

Batches are synthetic (random tokens of the config's shape, in device memory), so this
times the model and optimizer alone. For each encoding: compile time of the first step,
then, after one untimed warm-up window, the median over timed windows
(device-synchronised) of steps/s and tokens/s, and
the step time as a ratio to the first encoding listed (put `none` first).
"""
import argparse
import functools
import json
import os
import statistics
import sys
import time

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax.training import train_state

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configs.listops import lra  # noqa: E402
from lra_posenc.listops import train  # noqa: E402
from lra_posenc.training import optim, trainer  # noqa: E402


def benchmark(config, *, windows: int, steps_per_window: int) -> dict:
  """Compile seconds and median steps/s of the pmapped train step for `config`."""
  model = train.create_model(config)
  batch_size, length = config.training.batch_size, config.data.max_length
  rng = np.random.default_rng(0)
  batch = trainer.shard({
      'inputs': rng.integers(1, 16, (batch_size, length), dtype=np.int32),
      'targets': rng.integers(0, config.data.num_classes, (batch_size,), dtype=np.int32),
      'weight': np.ones((batch_size,), np.float32)})
  batch = next(flax.jax_utils.prefetch_to_device(iter([batch]), size=1))  # On the devices once, not per step.
  task = trainer.Task(
      init_params=lambda key: model.init({'params': key}, jnp.zeros((1, length), jnp.int32), train=False)['params'],
      metrics=functools.partial(train.classification_metrics, model), train_batches=None, eval_batches=None,
      selection_metric='accuracy', artifacts={}, baselines={})
  tx = optim.create_optimizer(config.optimizer, config.training.num_train_steps)
  state = train_state.TrainState.create(apply_fn=None, params=jax.jit(task.init_params)(jax.random.PRNGKey(0)), tx=tx)
  state = flax.jax_utils.replicate(state)
  step_rng = flax.jax_utils.replicate(jax.random.PRNGKey(1))
  p_train_step = jax.pmap(lambda s, b, r: trainer.train_step(s, b, r, task=task), axis_name=trainer.AXIS,
                          donate_argnums=0)
  start = time.perf_counter()
  state, metrics, _ = p_train_step(state, batch, step_rng)
  jax.block_until_ready(metrics)
  compile_seconds = time.perf_counter() - start
  rates = []
  for window in range(windows + 1):  # The first window warms up and is not counted.
    start = time.perf_counter()
    for _ in range(steps_per_window):
      state, metrics, _ = p_train_step(state, batch, step_rng)
    jax.block_until_ready((state, metrics))
    if window:
      rates.append(steps_per_window / (time.perf_counter() - start))
  steps_per_second = statistics.median(rates)
  return {'compile_seconds': compile_seconds, 'steps_per_second': steps_per_second,
          'tokens_per_second': steps_per_second * batch_size * length, 'window_steps_per_second': rates}


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--config', default='cpu', help="lra.py's argument: 'cpu' or 'lra'.")
  parser.add_argument('--encodings', default='none,sinusoidal,learned,rope,alibi,t5,chebyshev,legendre')
  parser.add_argument('--windows', type=int, default=5)
  parser.add_argument('--steps_per_window', type=int, default=20)
  parser.add_argument('--out', default='')
  args = parser.parse_args(argv)
  results = {'device': str(jax.devices()[0].device_kind), 'devices': jax.local_device_count(),
             'config': args.config, 'encodings': {}}
  baseline = None
  print(f'{"encoding":<12} {"compile s":>9} {"steps/s":>9} {"tokens/s":>11} {"step time / first":>18}')
  for encoding in args.encodings.split(','):
    config = lra.get_config(None if args.config == 'lra' else args.config)
    config.model.pos_encoding = encoding
    measured = benchmark(config, windows=args.windows, steps_per_window=args.steps_per_window)
    baseline = baseline or measured['steps_per_second']
    measured['step_time_ratio'] = baseline / measured['steps_per_second']
    results['encodings'][encoding] = measured
    print(f'{encoding:<12} {measured["compile_seconds"]:>9.2f} {measured["steps_per_second"]:>9.2f} '
          f'{measured["tokens_per_second"]:>11.0f} {measured["step_time_ratio"]:>18.3f}')
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(results, f, indent=2)


if __name__ == '__main__':
  main()
