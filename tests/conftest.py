"""Shared fixtures: a tiny generated ListOps set and a config that trains on it in seconds."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configs.listops import lra  # noqa: E402
from lra_posenc.data import listops  # noqa: E402
from lra_posenc.training.checkpointing import Checkpoints  # noqa: E402

# Single-operator expressions: learnable by a one-layer model in a few hundred steps.
TINY_GENERATOR = listops.GeneratorOptions(max_depth=2, max_args=5, min_length=2, max_length=24)


@pytest.fixture(scope='session')
def tiny_data_dir(tmp_path_factory) -> str:
  data_dir = str(tmp_path_factory.mktemp('listops'))
  listops.write_splits(data_dir, seed=0, sizes=dict(train=512, val=48, test=40), options=TINY_GENERATOR)
  return data_dir


def tiny_config(data_dir: str, **training):
  """A one-layer model on sequences of <= 24 tokens; `training` overrides config.training."""
  config = lra.get_config('cpu')
  config.data.data_dir = data_dir
  config.data.max_length = 24
  config.model.update(emb_dim=32, qkv_dim=32, mlp_dim=64, classifier_dim=32, num_heads=4, num_layers=1)
  config.optimizer.update(learning_rate=3e-3, warmup_steps=5)
  config.training.update(batch_size=16, num_train_steps=20, log_every_steps=5)
  config.training.update(**training)
  config.evaluation.update(batch_size=16, every_steps=10)
  config.checkpoint.update(every_steps=10)
  return config


def final_params(workdir, step: int):
  """The parameters of the latest-checkpoints entry at `step` in `workdir`."""
  state, _ = Checkpoints.restore(Checkpoints(str(workdir), max_to_keep=2).latest, step)
  return state['params']
