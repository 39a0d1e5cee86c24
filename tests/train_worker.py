"""Trains a tiny config in a process of its own, for tests that signal or kill it or run several.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/train_worker.py DATA_DIR WORKDIR STEPS \\
        [--task listops|translation|lm] [--out OUT.npz] [--checkpoint_every N] [--dropout RATE] \\
        [--set SECTION.KEY=VALUE ...] [--coordinator_address HOST:PORT --num_processes N --process_id I]

Prints the results (without the config) as one JSON line; with --out, process 0 also
saves the final parameters (every process takes part in restoring them).
"""
import argparse
import ast
import json

import jax
import numpy as np

from conftest import final_params, tiny_config, toy_config, toy_lm_config
from lra_posenc.listops import train as listops_train
from lra_posenc.lm import train as lm_train
from lra_posenc.training import distributed, trainer
from lra_posenc.translation import train as translation_train

TASKS = {'listops': (tiny_config, listops_train.create_task), 'translation': (toy_config, translation_train.create_task),
         'lm': (toy_lm_config, lm_train.create_task)}


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument('data_dir')
  parser.add_argument('workdir')
  parser.add_argument('steps', type=int)
  parser.add_argument('--task', choices=sorted(TASKS), default='listops')
  parser.add_argument('--out')
  parser.add_argument('--checkpoint_every', type=int, default=10)
  parser.add_argument('--dropout', type=float, default=0.0)
  parser.add_argument('--batch_size', type=int)
  parser.add_argument('--set', action='append', default=[], help='SECTION.KEY=VALUE (a Python literal)')
  parser.add_argument('--coordinator_address')
  parser.add_argument('--num_processes', type=int)
  parser.add_argument('--process_id', type=int)
  args = parser.parse_args()
  if args.coordinator_address:
    distributed.initialize(coordinator_address=args.coordinator_address, num_processes=args.num_processes,
                           process_id=args.process_id, timeout_seconds=60)
  make_config, create_task = TASKS[args.task]
  config = make_config(args.data_dir, num_train_steps=args.steps, log_every_steps=1)
  config.checkpoint.every_steps = args.checkpoint_every
  if args.batch_size:
    config.training.batch_size = args.batch_size
  config.model.update(dropout_rate=args.dropout, attention_dropout_rate=args.dropout,
                      activation_dropout_rate=args.dropout)
  for setting in args.set:
    path, value = setting.split('=', 1)
    section, key = path.rsplit('.', 1)
    config[section][key] = ast.literal_eval(value)
  results = trainer.train_and_evaluate(args.workdir, create_task(config, args.workdir))
  if args.out:
    leaves = jax.tree_util.tree_leaves_with_path(final_params(args.workdir, args.steps))  # Every process restores.
  if args.out and distributed.is_primary():
    np.savez(args.out, **{jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves})
  results.pop('config', None)
  print(json.dumps(results | {'devices': jax.device_count(), 'processes': jax.process_count()}))


if __name__ == '__main__':
  main()
