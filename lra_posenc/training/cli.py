"""The command line every task's train.py shares: --config, --workdir, --distributed.

Flags are defined only when a task module runs as a program, so tasks stay importable
side by side (by tests, sweeps, notebooks).
"""
import json
from collections.abc import Callable

import jax
import ml_collections
from absl import app, flags, logging
from ml_collections import config_flags

from lra_posenc.training import trainer
from lra_posenc.training.metric_writer import quiet_checkpoint_logs

TaskFactory = Callable[[ml_collections.ConfigDict, str], trainer.Task]


def run_training(create_task: TaskFactory, config_example: str) -> None:
  """Parses the command line, trains (or resumes) and prints the results without the config."""
  config_flags.DEFINE_config_file('config', None, f'Config file, e.g. {config_example}.', lock_config=True)
  flags.DEFINE_string('workdir', None, 'Checkpoints, logs, task artifacts and results.json go here.')
  flags.DEFINE_bool('distributed', False, 'Call jax.distributed.initialize() first (multi-host runs).')
  flags.mark_flags_as_required(['config', 'workdir'])

  def main(argv):
    del argv
    config, workdir = flags.FLAGS.config, flags.FLAGS.workdir
    quiet_checkpoint_logs()
    if flags.FLAGS.distributed:
      jax.distributed.initialize()
    logging.info('devices: %s', jax.devices())
    trainer.prepare_workdir(workdir)
    results = trainer.train_and_evaluate(config, workdir, create_task(config, workdir))
    print(json.dumps({k: results[k] for k in results if k != 'config'}, indent=2, sort_keys=True))

  app.run(main)
