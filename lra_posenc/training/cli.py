"""The command line every task's train.py shares: --config, --workdir and the multi-host flags.

Flags are defined only when a task module runs as a program, so tasks stay importable
side by side (by tests, sweeps, notebooks).
"""
import json
from collections.abc import Callable

import jax
import ml_collections
from absl import app, flags, logging
from ml_collections import config_flags

from lra_posenc.training import distributed, trainer
from lra_posenc.training.metric_writer import quiet_checkpoint_logs

TaskFactory = Callable[[ml_collections.ConfigDict, str], trainer.Task]


def define_distributed_flags() -> None:
  flags.DEFINE_bool('distributed', False, 'Call jax.distributed.initialize() first, auto-detecting the cluster '
                    '(TPU pods, SLURM, Open MPI). Implied by the three flags below.')
  flags.DEFINE_string('coordinator_address', None, 'HOST:PORT of process 0, for clusters without auto-detection '
                      'and for several processes on one machine.')
  flags.DEFINE_integer('num_processes', None, 'How many processes take part.')
  flags.DEFINE_integer('process_id', None, "This process's index, 0 .. num_processes - 1.")
  flags.DEFINE_integer('distributed_timeout', 300, 'Seconds to wait for every process to join.')


def initialize_distributed_from_flags() -> None:
  """Joins the other processes when --distributed or any of the three explicit flags is given."""
  explicit = {'coordinator_address': flags.FLAGS.coordinator_address, 'num_processes': flags.FLAGS.num_processes,
              'process_id': flags.FLAGS.process_id}
  if flags.FLAGS.distributed or any(value is not None for value in explicit.values()):
    distributed.initialize(**explicit, timeout_seconds=flags.FLAGS.distributed_timeout)


def run_training(create_task: TaskFactory, config_example: str) -> None:
  """Parses the command line, trains (or resumes) and prints the results without the config."""
  config_flags.DEFINE_config_file('config', None, f'Config file, e.g. {config_example}.', lock_config=True)
  flags.DEFINE_string('workdir', None, 'Checkpoints, logs, task artifacts and results.json go here.')
  define_distributed_flags()
  flags.mark_flags_as_required(['config', 'workdir'])

  def main(argv):
    del argv
    config, workdir = flags.FLAGS.config, flags.FLAGS.workdir
    quiet_checkpoint_logs()
    initialize_distributed_from_flags()
    logging.info('devices: %s', jax.devices())
    results = trainer.train_and_evaluate(config, workdir, create_task(config, workdir))
    if distributed.is_primary():
      print(json.dumps({k: results[k] for k in results if k != 'config'}, indent=2, sort_keys=True))

  app.run(main)
