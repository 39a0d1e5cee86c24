"""What a user meets at the command line: one-line errors with exit status 2 and no workdir left, --help exiting 0."""
import importlib
import inspect
import json
import os
import pkgutil
import signal
import subprocess
import sys

import pytest
from conftest import wait_for
from lra_posenc import studies
from lra_posenc.training.checkpointing import restore_best
from lra_posenc.translation.settings import CONFIG_HISTORY as TRANSLATION_CONFIGS

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
    (['--config=configs/listops/lra.py:cpu', '--config.model.pos_encoding=rope',
      '--config.model.pos_encoding_options.rope.base=-1'],
     'error: model.pos_encoding_options.rope.base=-1.0 must be > 1 (wavelengths grow from 2 pi to 2 pi base)'),
    (['--config=configs/listops/lra.py:cpu_typo'],
     "error: --config=configs/listops/lra.py:cpu_typo: config argument 'cpu_typo' is not one of [None, 'cpu', "
     "'sweep', 'chebyshev_study', 'fused']"),
    (['--config=configs/listops/lra.py:cpu', '--config.training.batch_size=abc'],
     "error: --config.training.batch_size=abc: invalid literal for int() with base 10: 'abc'"),
    (['--config=configs/listops/lra.py:cpu', '--config.model.pos_encoding=sine'],
     "error: model.pos_encoding='sine' is not a known encoding; valid choices: ['none', 'alibi', 'chebyshev', "
     "'cope', 'dape', 'dynamic_bias', 'fire', 'kerple_log', 'kerple_power', 'learned', 'legendre', 'rope', "
     "'sinusoidal', 't5', 'transformer_xl', 'xpos']"),
])
def test_a_user_error_is_one_line_with_status_2_and_leaves_no_workdir(tmp_path, overrides, message):
  workdir = tmp_path / 'run'
  process = run(TRAIN + [f'--workdir={workdir}'] + overrides)
  assert process.returncode == 2
  errors = [line for line in process.stderr.splitlines() if not line.startswith(('I1', 'W1', 'E1'))]  # absl logs.
  assert errors[0] == message and errors[1:] in ([], ['(add --traceback for the whole traceback)'])
  assert 'Traceback' not in process.stderr and not workdir.exists()


def test_traceback_shows_the_whole_traceback_of_a_user_error(tmp_path):
  process = run(TRAIN + [f'--workdir={tmp_path / "run"}', '--config=configs/listops/lra.py:cpu',
                         '--config.model.pos_encoding=sine', '--traceback'])
  assert process.returncode != 0 and 'Traceback (most recent call last)' in process.stderr
  assert process.stderr.rstrip().splitlines()[-1].startswith("ValueError: model.pos_encoding='sine'")


ENTRY_POINTS = ['lra_posenc.listops.train', 'lra_posenc.translation.train', 'lra_posenc.translation.translate',
                'lra_posenc.translation.decoding_grid', 'lra_posenc.translation.significance',
                *[f'lra_posenc.studies.{study.name}' for study in pkgutil.iter_modules(studies.__path__)]]


def takes_argv(module: str) -> bool:
  """Whether the entry point is an argparse `main(argv=None)`, which answers --help in this process (a few
  seconds less than a process of its own); absl programs, whose flags are process-wide, answer it in their own."""
  main = getattr(importlib.import_module(module), 'main', None)
  return main is not None and inspect.signature(main).parameters['argv'].default is None


@pytest.mark.parametrize('command', [
    *[[sys.executable, '-m', module] for module in ENTRY_POINTS],
    *[[os.path.join(ROOT, 'scripts', name)] for name in sorted(os.listdir(os.path.join(ROOT, 'scripts')))],
])
def test_help_exits_0_and_scripts_are_executable(command, capsys):
  if command[0].endswith('.py'):
    assert os.access(command[0], os.X_OK), command[0]
    command = [sys.executable] + command  # The shebang's python3 may be another interpreter than this one.
  elif command[1:2] == ['-m'] and takes_argv(command[2]):
    with pytest.raises(SystemExit) as exited:
      importlib.import_module(command[2]).main(['--help'])
    assert exited.value.code == 0 and 'usage' in capsys.readouterr().out.lower()
    return
  process = run(command + ['--help'])
  assert process.returncode == 0, process.stderr[-2000:]
  assert 'usage' in process.stdout.lower() or '--' in process.stdout


def test_translate_with_a_workdir_of_another_task_or_none_says_so_in_one_line(tmp_path):
  from configs.listops import lra
  (tmp_path / 'listops').mkdir()
  (tmp_path / 'listops' / 'config.json').write_text(lra.get_config('cpu').to_json())
  translate = [sys.executable, '-m', 'lra_posenc.translation.translate']
  process = run(translate + [f'--workdir={tmp_path / "listops"}', 'A dog runs.'])
  assert process.returncode == 2
  assert process.stderr.splitlines()[-2] == (
      f"error: {tmp_path / 'listops'} is not a translation workdir: its config.json has task 'listops'; give a "
      'workdir of lra_posenc.translation.train')
  # Checked before anything is restored: this workdir has no checkpoint, which would be another error.
  with pytest.raises(ValueError, match="is not a translation workdir: its config.json has task 'listops'"):
    restore_best(str(tmp_path / 'listops'), TRANSLATION_CONFIGS)
  process = run(translate + [f'--workdir={tmp_path / "nothing"}', 'A dog runs.'])
  assert process.returncode == 2
  assert process.stderr.splitlines()[-2] == (
      f'error: {tmp_path / "nothing"}/config.json: not a training workdir (no config.json)')


# A small ListOps run that would train for long, checkpointing every 10 steps: one to stop with a signal. Overrides
# as training's --config.KEY=VALUE, which sweep.py accepts too.
LONG_SMALL_RUN = [f'--config.{setting}' for setting in (
    'model.num_layers=1', 'data.generator.num_train_samples=512', 'data.generator.num_valid_samples=32',
    'data.generator.num_test_samples=32', 'checkpoint.every_steps=10', 'evaluation.every_steps=10',
    'training.num_train_steps=100000')]


def stopped_by_sigterm(command: list[str], checkpoint: str) -> tuple[subprocess.Popen, str, str]:
  """Starts `command`, sends it SIGTERM once `checkpoint` (a directory) exists, and waits for it to end: the process,
  its stdout and stderr."""
  env = os.environ | {'PYTHONPATH': ROOT, 'JAX_PLATFORMS': 'cpu'}
  process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    wait_for(checkpoint, process)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
  finally:
    if process.poll() is None:
      process.kill()
  return process, stdout, stderr


@pytest.mark.slow
def test_a_run_stopped_by_sigterm_exits_75(tmp_path):  # A finished one exits 0: test_gpu_campaign's runs.
  workdir = tmp_path / 'run'
  process, stdout, _ = stopped_by_sigterm(
      TRAIN + ['--config=configs/listops/lra.py:cpu', f'--workdir={workdir}', *LONG_SMALL_RUN],
      workdir / 'checkpoints' / '10')
  assert process.returncode == 75
  stopped = json.loads(stdout)
  assert stopped['status'] == 'stopped' and stopped['step'] >= 10


@pytest.mark.slow
def test_a_sweep_stopped_by_sigterm_stops_its_running_training_and_starts_no_other(tmp_path):
  """The signal reaches the training the sweep runs, which saves and exits; the sweep starts no second seed and
  exits naming both runs, and nothing of it is left running to meet a second sweep in the same workdirs."""
  output_dir = tmp_path / 'sweep'
  first = output_dir / 'none' / 'seed_0'
  process, stdout, stderr = stopped_by_sigterm(
      [sys.executable, '-m', 'lra_posenc.studies.sweep', '--task=listops',
       '--config=configs/listops/lra.py:cpu', '--variants=none', '--seeds=0,1', f'--output_dir={output_dir}',
       *LONG_SMALL_RUN],
      first / 'checkpoints' / '10')
  assert process.returncode == 1 and '2 run(s) failed' in stderr
  assert 'SIGTERM received: saving a checkpoint' in (first / 'train.log').read_text()
  assert 'training none seed 1' not in stdout and not (output_dir / 'none' / 'seed_1').exists()

  def command_line(pid: str) -> bytes:
    try:
      with open(f'/proc/{pid}/cmdline', 'rb') as f:
        return f.read()
    except OSError:  # Ended meanwhile.
      return b''

  assert [pid for pid in os.listdir('/proc') if pid.isdigit() and str(first).encode() in command_line(pid)] == []


def test_a_second_run_finds_its_compiled_step_in_the_persistent_cache(tmp_path):
  """The cache is where --compilation_cache_dir says, the second run of one setting compiles from it (faster),
  and each run reports its compile time in results.json; an empty flag writes no cache, not even where jax's
  own variable names one."""
  cache, variable_cache = tmp_path / 'cache', tmp_path / 'variable_cache'
  small = ['--config=configs/listops/lra.py:cpu', '--config.model.num_layers=1', '--config.training.num_train_steps=2',
           '--config.training.log_every_steps=1', '--config.evaluation.every_steps=2',
           '--config.checkpoint.every_steps=2', '--config.data.generator.num_train_samples=64',
           '--config.data.generator.num_valid_samples=32', '--config.data.generator.num_test_samples=32']
  compile_seconds = []
  for name, cache_flag in (('first', str(cache)), ('second', str(cache)), ('uncached', '')):
    env = {'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0',  # Every program, however quick to compile.
           'JAX_COMPILATION_CACHE_DIR': str(variable_cache)}
    process = subprocess.run(TRAIN + [f'--workdir={tmp_path / name}', f'--compilation_cache_dir={cache_flag}', *small],
                             cwd=ROOT, env=os.environ | env | {'PYTHONPATH': ROOT, 'JAX_PLATFORMS': 'cpu'},
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr[-2000:]
    results = json.loads((tmp_path / name / 'results.json').read_text())
    compile_seconds.append(results['runs'][-1]['compile_seconds'])
    if name == 'first':
      cached = sorted(path.name for path in cache.rglob('*') if path.is_file())
      assert cached
  assert sorted(path.name for path in cache.rglob('*') if path.is_file()) == cached  # Nothing new to cache.
  assert not any(path.is_file() for path in variable_cache.rglob('*'))
  assert compile_seconds[1] < compile_seconds[0] and compile_seconds[1] < compile_seconds[2]
