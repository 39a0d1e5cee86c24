"""Trains the tiny config in a process of its own, for tests that need one.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/train_worker.py DATA_DIR WORKDIR STEPS [OUT.npz]

Prints the results (without the config) as one JSON line; with OUT.npz also saves the
final parameters.
"""
import json
import sys

import jax
import numpy as np

from conftest import final_params, tiny_config
from lra_posenc.listops import train
from lra_posenc.training import trainer


def main(data_dir: str, workdir: str, steps: str, output: str | None = None) -> None:
  config = tiny_config(data_dir, num_train_steps=int(steps), log_every_steps=1)
  results = trainer.train_and_evaluate(config, workdir, train.create_task(config, workdir))
  if output:
    leaves = jax.tree_util.tree_leaves_with_path(final_params(workdir, int(steps)))
    np.savez(output, **{jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves})
  results.pop('config', None)
  print(json.dumps(results | {'devices': jax.device_count()}))


if __name__ == '__main__':
  main(*sys.argv[1:])
