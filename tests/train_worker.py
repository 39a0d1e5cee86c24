"""Trains the tiny ListOps config in a process of its own, for tests that signal or kill it.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/train_worker.py DATA_DIR WORKDIR STEPS \
        [--out OUT.npz] [--checkpoint_every N] [--dropout RATE]

Prints the results (without the config) as one JSON line; with --out also saves the
final parameters.
"""
import argparse
import json

import jax
import numpy as np

from conftest import final_params, tiny_config
from lra_posenc.listops import train
from lra_posenc.training import trainer


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument('data_dir')
  parser.add_argument('workdir')
  parser.add_argument('steps', type=int)
  parser.add_argument('--out')
  parser.add_argument('--checkpoint_every', type=int, default=10)
  parser.add_argument('--dropout', type=float, default=0.0)
  args = parser.parse_args()
  config = tiny_config(args.data_dir, num_train_steps=args.steps, log_every_steps=1)
  config.checkpoint.every_steps = args.checkpoint_every
  config.model.update(dropout_rate=args.dropout, attention_dropout_rate=args.dropout)
  results = trainer.train_and_evaluate(config, args.workdir, train.create_task(config, args.workdir))
  if args.out:
    leaves = jax.tree_util.tree_leaves_with_path(final_params(args.workdir, args.steps))
    np.savez(args.out, **{jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves})
  results.pop('config', None)
  print(json.dumps(results | {'devices': jax.device_count()}))


if __name__ == '__main__':
  main()
