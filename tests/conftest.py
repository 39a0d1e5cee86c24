"""Shared fixtures: a tiny generated ListOps set, a config that trains on it in seconds, workers."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configs.listops import lra  # noqa: E402
from lra_posenc.data import listops  # noqa: E402
from lra_posenc.listops import train  # noqa: E402
from lra_posenc.training import trainer  # noqa: E402
from lra_posenc.training.checkpointing import Checkpoints  # noqa: E402

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

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


def run_listops(config, workdir, should_stop=None):
  return trainer.train_and_evaluate(config, str(workdir), train.create_task(config, str(workdir)), should_stop)


def start_worker(data_dir, workdir, steps, *options: str, devices: int = 1) -> subprocess.Popen:
  """tests/train_worker.py in a new process with `devices` CPU devices; `options` are its flags."""
  env = os.environ | {'XLA_FLAGS': f'--xla_force_host_platform_device_count={devices}', 'JAX_PLATFORMS': 'cpu'}
  command = [sys.executable, os.path.join(TESTS_DIR, 'train_worker.py'), data_dir, str(workdir), str(steps)]
  return subprocess.Popen(command + list(options), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def worker_results(process: subprocess.Popen) -> dict:
  stdout, stderr = process.communicate(timeout=300)
  assert process.returncode == 0, stderr[-3000:]
  return json.loads(stdout.strip().splitlines()[-1])
