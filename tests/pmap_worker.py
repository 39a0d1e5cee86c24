"""Trains the tiny config for a few steps on however many devices XLA_FLAGS gives; saves the parameters.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/pmap_worker.py DATA_DIR WORKDIR OUT.npz
"""
import json
import sys

import jax
import numpy as np

from conftest import tiny_config
from lra_posenc.listops import train
from lra_posenc.training import trainer
from lra_posenc.training.checkpointing import Checkpoints


def main(data_dir: str, workdir: str, output: str) -> None:
  config = tiny_config(data_dir, num_train_steps=6, log_every_steps=1)
  results = trainer.train_and_evaluate(config, workdir, train.create_task(config, workdir))
  state, _ = Checkpoints.restore(Checkpoints(workdir, max_to_keep=2).latest, 6)
  leaves = jax.tree_util.tree_leaves_with_path(state['params'])
  np.savez(output, **{jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves})
  print(json.dumps({'devices': jax.device_count(), 'test_loss': results['test']['loss']}))


if __name__ == '__main__':
  main(*sys.argv[1:])
