"""The command line every task's train.py shares (--config, --workdir, the multi-host flags), and
`run`, which every absl program here goes through: one-line user errors, --help exiting 0.

Flags are defined only when a task module runs as a program, so tasks stay importable
side by side (by tests, sweeps, notebooks).
"""
import json
import re
import sys
from collections.abc import Callable, Sequence

import jax
import ml_collections
from absl import app, flags, logging
from ml_collections import config_flags

from lra_posenc.training import distributed, trainer
from lra_posenc.training.run_files import quiet_checkpoint_logs
from lra_posenc.training.task import Task

TaskFactory = Callable[[ml_collections.ConfigDict, str], Task]
# Exit status of a run stopped by SIGTERM or Ctrl-C after saving: "resume me" (sysexits' EX_TEMPFAIL,
# a temporary failure to retry), apart from 0 (finished) and 2 (a user error).
STOPPED_EXIT_STATUS = 75


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
  """Parses the command line, trains (or resumes) and prints the results without the config.

  Exits 0 when training finished, STOPPED_EXIT_STATUS when a signal stopped it (re-run to
  resume), 2 on a user error.
  """
  config_flags.DEFINE_config_file('config', None, f'Config file, e.g. {config_example}.', lock_config=True)
  flags.DEFINE_string('workdir', None, 'Checkpoints, logs, task artifacts and results.json go here.')
  define_distributed_flags()
  flags.DEFINE_string('compilation_cache_dir', None, 'Where compiled programs are kept for later runs; default '
                      '$XDG_CACHE_HOME (~/.cache)/lra_posenc/xla/<jax version and device>; empty: no cache.')
  flags.mark_flags_as_required(['config', 'workdir'])

  def main(argv):
    del argv
    config, workdir = flags.FLAGS.config, flags.FLAGS.workdir
    quiet_checkpoint_logs()
    initialize_distributed_from_flags()
    logging.info('devices: %s', jax.devices())
    cache_dir = flags.FLAGS.compilation_cache_dir
    distributed.enable_compilation_cache(distributed.compilation_cache_directory() if cache_dir is None else cache_dir)
    results = trainer.train_and_evaluate(workdir, create_task(config, workdir))
    if distributed.is_primary():
      print(json.dumps({k: results[k] for k in results if k != 'config'}, indent=2, sort_keys=True))
    if results['status'] == 'stopped':
      sys.exit(STOPPED_EXIT_STATUS)

  run(main)


def run(main: Callable[[list[str]], None]) -> None:
  """`app.run(main)` for a user's command: --help exits 0 (absl exits 1), and a user error prints one line.

  User errors (a config key or file, data, the workdir: ValueError, which DataError is,
  and OSError) print `error: MESSAGE` and exit 2; --traceback shows the whole traceback instead. A
  config override or file that does not parse fails in flag parsing (AttributeError,
  KeyError, OSError; a config file's on first use, so it is touched before `main`); once
  `main` runs, AttributeError and KeyError are bugs and keep their traceback.
  """
  flags.DEFINE_bool('traceback', False, 'Show the whole traceback of a configuration, data or workdir error, '
                    'not only its one-line message.')
  started = False

  def started_main(argv):
    nonlocal started
    if 'config' in flags.FLAGS:
      flags.FLAGS.config.keys()  # A config file that failed to load raises on first use.
    started = True
    main(argv)

  if any(arg in ('--help', '-h', '--helpshort') for arg in sys.argv[1:]):
    app.usage(shorthelp=True, writeto_stdout=True, exitcode=0)
  try:
    app.run(started_main, flags_parser=_parse_flags)
  except (ValueError, OSError, AttributeError, KeyError) as error:
    if '--traceback' in sys.argv or (started and isinstance(error, (AttributeError, KeyError))):
      raise
    print(f'error: {user_error_message(error, sys.argv, parsing=not started)}', file=sys.stderr)
    print('(add --traceback for the whole traceback)', file=sys.stderr)
    sys.exit(2)


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with its errors (an unknown flag, a config file that raised) as one line and status 2."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    flag = re.match(r'flag (--\S+?): ', lines[0])
    # A config file's own exception, as its last line says, or the one line absl wrote.
    reason = re.sub(r'^(flag --\S+?: |\w+Error: )', '', lines[-1])
    print(f'error: {flag[1]}: {reason}' if flag else f'error: {lines[0]}', file=sys.stderr)
    sys.exit(2)


def user_error_message(error: BaseException, argv: Sequence[str], *, parsing: bool) -> str:
  """One line for a user's mistake: the flag, key, file or line it names, and what to do."""
  text = str(error)
  if parsing and isinstance(error, (AttributeError, KeyError)):
    overrides = [a.split('=')[0] for a in argv if a.startswith('--config.')]
    flag = next((f for f in overrides if re.search(rf'\b{re.escape(f.rsplit(".", 1)[-1])}\b', text)), None)
    suggestion = re.search(r'Did you mean \W*"(\w+)"', text)
    where = f'{flag}: config.{flag[len("--config."):]} is not a config key' if flag else 'an unknown config key'
    return where + (f'; did you mean {suggestion[1]!r}?' if suggestion else '')
  if parsing and isinstance(error, OSError):
    config = next((a.split('=', 1)[1] for a in argv if a.startswith('--config=')), None)
    reason = [line.strip() for line in text.splitlines() if line.strip()][-1]
    return f'--config={config}: the config file could not be loaded ({reason})'
  return str(error)
