"""What a user meets at the command line: one-line errors with exit status 2 and no workdir left, --help exiting 0."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = [sys.executable, '-m', 'lra_posenc.listops.train']


def run(arguments: list[str], *, cwd=ROOT) -> subprocess.CompletedProcess:
  env = os.environ | {'PYTHONPATH': ROOT, 'JAX_PLATFORMS': 'cpu'}
  return subprocess.run(arguments, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize('overrides, message', [
    (['--config=configs/listops/lra.py:cpu', '--config.model.pos_encodng=rope'],
     "error: --config.model.pos_encodng: config.model.pos_encodng is not a config key; did you mean 'pos_encoding'?"),
    (['--config=configs/listops/lra.pyx'],
     "error: --config=configs/listops/lra.pyx: the config file could not be loaded ([Errno 2] No such file or "
     "directory: 'configs/listops/lra.pyx')"),
    (['--config=configs/listops/lra.py:cpu', '--config.model.pos_encoding=sine'],
     "error: model.pos_encoding='sine' is not a known encoding; valid choices: ['none', 'sinusoidal', 'learned', "
     "'rope', 'alibi', 't5', 'chebyshev', 'legendre']"),
])
def test_a_user_error_is_one_line_with_status_2_and_leaves_no_workdir(tmp_path, overrides, message):
  workdir = tmp_path / 'run'
  process = run(TRAIN + [f'--workdir={workdir}'] + overrides)
  assert process.returncode == 2
  errors = [line for line in process.stderr.splitlines() if not line.startswith(('I1', 'W1', 'E1'))]  # absl logs.
  assert errors == [message, '(add --traceback for the whole traceback)']
  assert 'Traceback' not in process.stderr and not workdir.exists()
  with_traceback = run(TRAIN + [f'--workdir={workdir}', '--traceback'] + overrides)
  assert with_traceback.returncode != 0 and 'Traceback (most recent call last)' in with_traceback.stderr


@pytest.mark.parametrize('command', [
    TRAIN, [sys.executable, '-m', 'lra_posenc.translation.train'],
    [sys.executable, '-m', 'lra_posenc.translation.translate'],
    *[[os.path.join(ROOT, 'scripts', name)] for name in sorted(os.listdir(os.path.join(ROOT, 'scripts')))],
])
def test_help_exits_0_and_scripts_are_executable(command):
  if command[0].endswith('.py'):
    assert os.access(command[0], os.X_OK), command[0]
    command = [sys.executable] + command  # The shebang's python3 may be another interpreter than this one.
  process = run(command + ['--help'])
  assert process.returncode == 0, process.stderr[-2000:]
  assert 'usage' in process.stdout.lower() or '--' in process.stdout
