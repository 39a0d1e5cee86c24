"""Shared fixtures: tiny ListOps, translation and text sets, configs that train on them in seconds, workers."""
import concurrent.futures
import contextlib
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import chex
import jax
import ml_collections
import numpy as np
import pytest

from configs.listops import lra
from configs.lm import shakespeare_char
from configs.translation import multi30k
from lra_posenc.data import listops
from lra_posenc.listops import train
from lra_posenc.training import distributed, trainer
from lra_posenc.training.checkpointing import Checkpoints

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


# XLA:CPU's compiler settings for the tests. Their programs are tiny, so compiling them, not running
# them, is most of the suite's time:
# - LLVM at -O0 (a one-layer ListOps model's initialisation 7.8 s at the default, 2.8 s at 0; a
#   two-layer translation train step 14 s, 9 s; the suite 17 min 21 s, 13 min 11 s: 1a517b5);
# - at -O0, the older loop emitters instead of the MLIR fusion emitters (a one-layer classifier's
#   gradient compiles in 0.29-0.40 s instead of 0.91-1.07 s). Not for real runs: at the default -O,
#   `:tiny`'s train steps took 250 s to compile instead of 41 s, and ran no faster
#   (results/performance/fusion_emitters_2026-11-29/).
# Results then differ from the default's in the last bits (about 1e-7 relative), so every run a test
# compares with another, in this process or one it starts, is computed under the same flags.
TEST_XLA_FLAGS = ('--xla_backend_optimization_level=0', '--xla_cpu_use_fusion_emitters=false')
TEST_CACHE_VARIABLE = 'LRA_POSENC_TESTS_XLA_CACHE'  # The session's compilation cache, for its workers.


def pytest_configure(config):
  """XLA's settings for the session, in this process and the processes tests start.

  Before the first computation, so this process's backend starts with them: one compilation
  cache (tests compile the same small programs again and again: a run and its resumed twin,
  one config in several processes; a cache hit loads the executable XLA built for the
  identical program, so results are unchanged) and the TEST_XLA_FLAGS this XLA knows. The
  cache is the session's: pytest-xdist's workers, started after this runs in the main process,
  inherit its directory from the environment, which the main process alone removes at the end.
  """
  directory = os.environ.get(TEST_CACHE_VARIABLE)
  if not directory:
    directory = os.environ[TEST_CACHE_VARIABLE] = tempfile.mkdtemp(prefix='lra_posenc_tests_xla_cache_')
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))
  settings = {'jax_compilation_cache_dir': directory, 'jax_persistent_cache_min_compile_time_secs': 0,
              'jax_persistent_cache_min_entry_size_bytes': 0}
  for name, value in settings.items():
    jax.config.update(name, value)
    os.environ[name.upper()] = str(value)
  if hasattr(config, 'workerinput'):
    return  # A pytest-xdist worker: its XLA_FLAGS, inherited, already hold the flags the main process kept.
  set_flags = os.environ.get('XLA_FLAGS', '').split()
  wanted = [flag for flag in TEST_XLA_FLAGS if flag not in set_flags]
  known = known_xla_flags(wanted)
  if unknown := [flag for flag in wanted if flag not in known]:
    config.issue_config_time_warning(pytest.PytestConfigWarning(
        f'this XLA does not know {" ".join(unknown)}: the tests compile without it, more slowly'), stacklevel=2)
  os.environ['XLA_FLAGS'] = distributed.with_xla_flags(os.environ, *known)['XLA_FLAGS']


def known_xla_flags(flags: list[str]) -> list[str]:
  """`flags` less those this jaxlib's XLA does not know: it aborts any process given an unknown flag,
  and XLA retires flags (the loop emitters are on their way out). One short process (1.4 s) tries them
  all; only if it fails does one more try each."""
  def known(*candidates: str) -> bool:
    probe = [sys.executable, '-c', 'import jax; jax.numpy.zeros(1).block_until_ready()']
    environment = distributed.with_xla_flags(os.environ, *candidates)
    return subprocess.run(probe, env=environment, capture_output=True, check=False).returncode == 0

  if not flags or known(*flags):
    return list(flags)
  return [flag for flag in flags if known(flag)]


def pytest_report_header() -> str:
  """The flags the tests' programs are compiled with, since results differ from the default's in the last bits."""
  return f'XLA_FLAGS: {os.environ.get("XLA_FLAGS", "")} (tests/conftest.py: TEST_XLA_FLAGS this XLA knows)'


# Single-operator expressions: learnable by a one-layer model in a few hundred steps.
TINY_GENERATOR = listops.GeneratorOptions(max_depth=2, max_args=5, longer_than=2, shorter_than=24)


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


# A word-for-word "translation": learnable by a one-layer model in a few hundred steps.
LEXICON = {'one': 'eins', 'two': 'zwei', 'three': 'drei', 'red': 'rot', 'blue': 'blau', 'green': 'grün',
           'dog': 'Hund', 'cat': 'Katze', 'house': 'Haus', 'tree': 'Baum', 'big': 'groß', 'small': 'klein'}


def toy_pairs(count: int, seed: int) -> list[tuple[str, str]]:
  rng = np.random.default_rng(seed)
  words = list(LEXICON)
  sources = [' '.join(rng.choice(words, rng.integers(2, 6))) for _ in range(count)]
  return [(s, ' '.join(LEXICON[w] for w in s.split())) for s in sources]


def write_split(directory, split: str, pairs, *, compress: bool) -> None:
  for lang, column in (('en', 0), ('de', 1)):
    text = ''.join(pair[column] + '\n' for pair in pairs).encode('utf-8')
    path = os.path.join(directory, f'{split}.{lang}' + ('.gz' if compress else ''))
    with (gzip.open if compress else open)(path, 'wb') as f:
      f.write(text)


@pytest.fixture(scope='session')
def toy_corpus(tmp_path_factory) -> str:
  directory = str(tmp_path_factory.mktemp('toy_corpus'))
  train_pairs = toy_pairs(256, seed=0)
  write_split(directory, 'train', train_pairs, compress=True)
  write_split(directory, 'val', train_pairs[:64], compress=False)  # Memorisation is what is tested.
  write_split(directory, 'test', train_pairs[64:128], compress=True)
  return directory


def toy_config(data_dir: str, **training) -> ml_collections.ConfigDict:
  config = multi30k.get_config('cpu')
  config.data.update(data_dir=data_dir, test_splits=('test',), max_length=16, max_eval_source_length=16,
                     length_buckets=(8, 16))
  config.data.tokenizer.vocab_size = 64
  config.model.update(emb_dim=32, qkv_dim=32, mlp_dim=64, num_heads=4, num_layers=1, dropout_rate=0.0,
                      attention_dropout_rate=0.0, activation_dropout_rate=0.0)
  config.optimizer.update(learning_rate=3e-3, warmup_steps=20)
  config.training.update(batch_size=16, num_train_steps=20, log_every_steps=10)
  config.training.update(**training)
  config.evaluation.update(batch_size=32, every_steps=100)
  config.checkpoint.update(every_steps=100)
  config.decoding.update(beam_size=2, max_output_length=16, batch_size=32)
  return config


@pytest.fixture(scope='session')
def toy_text(tmp_path_factory) -> str:
  """A directory holding input.txt: 3000 characters of a pattern a one-layer model learns in tens of steps."""
  directory = tmp_path_factory.mktemp('toy_text')
  (directory / 'input.txt').write_text(''.join(chr(97 + (i * i + i // 7) % 9) for i in range(3000)))
  return str(directory)


def toy_lm_config(data_dir: str, **training) -> ml_collections.ConfigDict:
  """Windows of 16 characters of `toy_text`'s input.txt, a one-layer model, scored at 1 and 2 windows."""
  config = shakespeare_char.get_config('cpu')
  config.data.update(text_file=os.path.join(data_dir, 'input.txt'), block_size=16)
  config.model.update(emb_dim=32, qkv_dim=32, mlp_dim=64, num_heads=4, num_layers=1, pos_encoding='rope')
  config.optimizer.update(learning_rate=1e-2, warmup_steps=5)
  config.training.update(batch_size=16, num_train_steps=20, log_every_steps=5)
  config.training.update(**training)
  config.evaluation.update(batch_size=16, every_steps=10)
  config.checkpoint.update(every_steps=10)
  config.scoring.length_multiples = (1, 2)
  return config


def final_params(workdir, step: int):
  """The parameters of the latest-checkpoints entry at `step` in `workdir`."""
  with Checkpoints(str(workdir), max_to_keep=2) as checkpoints:
    state, _ = checkpoints.restore(step)
  return state['params']


def assert_same_parameters(expected_npz, got_npz, *, exact: bool) -> None:
  """The parameters saved by two workers' --out are equal, or with `exact=False` equal up to float32 rounding.

  Rounding comes from summing gradients in another order (other device counts, gloo
  across processes). Key biases are then left out: they shift every logit of a query
  alike, which softmax ignores, so their true gradient is zero and Adam turns the
  rounding noise into full-size steps; they cannot change the output.
  """
  expected, got = dict(np.load(expected_npz)), dict(np.load(got_npz))
  if exact:
    chex.assert_trees_all_equal(got, expected)
  else:
    kept = lambda params: {name: value for name, value in params.items() if "['key']['bias']" not in name}
    chex.assert_trees_all_close(kept(got), kept(expected), atol=2e-5, rtol=0)


def run_listops(config, workdir, should_stop=None):
  return trainer.train_and_evaluate(str(workdir), train.create_task(config, str(workdir)), should_stop)


def start_worker(data_dir, workdir, steps, *options: str, devices: int = 1, cwd=None) -> subprocess.Popen:
  """tests/train_worker.py in a new process with `devices` CPU devices; `options` are its flags."""
  # The repository root, as pytest.ini's pythonpath gives the tests: the worker imports conftest, and it the configs.
  root = os.path.dirname(TESTS_DIR)
  env = distributed.with_xla_flags(os.environ, f'--xla_force_host_platform_device_count={devices}') | {
      'JAX_PLATFORMS': 'cpu', 'PYTHONPATH': os.pathsep.join(filter(None, [root, os.environ.get('PYTHONPATH')]))}
  command = [sys.executable, os.path.join(TESTS_DIR, 'train_worker.py'), data_dir, str(workdir), str(steps)]
  return subprocess.Popen(command + list(options), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=cwd)


def wait_for(path, process: subprocess.Popen, seconds: float = 300) -> None:
  """Waits until `path` exists while `process` runs.

  A process that dies fails the wait at once; the deadline only catches a hang. Two workers
  starting, joining and compiling on 2 loaded cores took over 120 s (both of test_multihost's
  waits failed so on 2026-11-26, beside a training run), hence 300.
  """
  deadline = time.monotonic() + seconds
  while not path.exists():
    assert process.poll() is None and time.monotonic() < deadline, f'{path} never appeared'
    time.sleep(0.05)


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


@contextlib.contextmanager
def worker_group(data_dir, workdir, steps, *options: str, processes: int, devices: int, cwds=None):
  """`processes` workers of one distributed run, `devices` CPU devices each; killed on exit if still running.

  `cwds`, one per process, give each its own working directory (and so its own view
  of a relative workdir, as hosts with different mounts have).
  """
  address = f'127.0.0.1:{free_port()}'
  workers = [start_worker(data_dir, workdir, steps, *options, '--coordinator_address', address,
                          '--num_processes', str(processes), '--process_id', str(index), devices=devices,
                          cwd=cwds[index] if cwds else None)
             for index in range(processes)]
  try:
    yield workers
  finally:
    for worker in workers:
      if worker.poll() is None:
        worker.kill()
        worker.communicate()


def group_results(workers: list[subprocess.Popen]) -> list[dict]:
  """Every worker's results, read concurrently so that no worker blocks on a full pipe."""
  with concurrent.futures.ThreadPoolExecutor(len(workers)) as pool:
    return list(pool.map(worker_results, workers))


def group_failures(workers: list[subprocess.Popen]) -> list[str]:
  """Every worker's standard error, once all have exited, each with a non-zero status."""
  with concurrent.futures.ThreadPoolExecutor(len(workers)) as pool:
    outputs = list(pool.map(lambda worker: worker.communicate(timeout=300), workers))
  assert all(worker.returncode != 0 for worker in workers), [stdout[-500:] for stdout, _ in outputs]
  return [stderr for _, stderr in outputs]


def worker_results(process: subprocess.Popen) -> dict:
  stdout, stderr = process.communicate(timeout=300)
  assert process.returncode == 0, stderr[-3000:]
  return json.loads(stdout.strip().splitlines()[-1])
