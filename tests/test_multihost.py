"""Several processes, one run: 2 processes x 2 CPU devices (gloo) against 1 process x 4 devices.

Each run is real: separate processes joined by `jax.distributed` on a free local port,
sharing one workdir; faults are real signals. Every process a test starts is killed
when the test ends, whatever its outcome.
"""
import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import (assert_same_parameters, free_port, group_failures, group_results, start_worker, wait_for,
                      worker_group, worker_results)
from lra_posenc.training import distributed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.slow  # Every test starts processes of its own.

STEPS = 24
OPTIONS = ('--dropout', '0.1', '--checkpoint_every', '4')  # Dropout on: the keys of every device must agree.


def run_group(data_dir, workdir, *options: str, steps: int = STEPS) -> list[dict]:
  with worker_group(data_dir, workdir, steps, *OPTIONS, *options, processes=2, devices=2) as workers:
    return group_results(workers)


def comparable(results: dict, prefix: str = '') -> dict:
  """What must agree between two runs of one config, flattened: everything but timings, topology and provenance."""
  flat = {}
  for key, value in results.items():
    if key not in ('train_seconds_this_run', 'train_seconds_total', 'runs', 'devices', 'processes', 'provenance'):
      flat |= comparable(value, f'{prefix}{key}/') if isinstance(value, dict) else {prefix + key: value}
  return flat


def assert_same_results(got: dict, expected: dict) -> None:
  """Equal, but for metrics summed by gloo in another order (float32 rounding, hence rel 1e-6)."""
  got, expected = comparable(got), comparable(expected)
  assert got.keys() == expected.keys()
  for key, value in expected.items():
    floats = isinstance(value, float) or (isinstance(value, list) and all(isinstance(v, float) for v in value))
    assert got[key] == (pytest.approx(value, rel=1e-6) if floats else value), key


@pytest.fixture(scope='module')
def listops_runs(tiny_data_dir, tmp_path_factory):
  """The same ListOps run as 1 process x 4 devices and as 2 processes x 2 devices."""
  root = tmp_path_factory.mktemp('listops_runs')
  one = worker_results(start_worker(tiny_data_dir, root / 'one', STEPS, *OPTIONS, '--out', str(root / 'one.npz'),
                                    devices=4))
  two = run_group(tiny_data_dir, root / 'two', '--out', str(root / 'two.npz'))
  return root, one, two


def test_listops_two_processes_match_one(listops_runs):
  root, one, two = listops_runs
  assert one['processes'] == 1 and [r['processes'] for r in two] == [2, 2]
  assert one['devices'] == two[0]['devices'] == 4
  assert comparable(two[0]) == comparable(two[1])  # Every host reports the same run.
  assert_same_parameters(root / 'one.npz', root / 'two.npz', exact=False)
  assert_same_results(two[0], one)
  with open(root / 'two' / 'results.json') as f:
    written = json.load(f)
  assert written['test'] == two[0]['test'] and written['best_step'] == one['best_step']


def test_translation_two_processes_match_one(toy_corpus, tmp_path):
  # Token-budget batches: 12 sentences of bucket 8, 4 of bucket 16, split over 2 processes x 2 devices.
  options = ('--task', 'translation', '--checkpoint_every', '12', '--set', 'training.max_tokens=96')
  one = worker_results(start_worker(toy_corpus, tmp_path / 'one', 12, *options, '--dropout', '0.1',
                                    '--out', str(tmp_path / 'one.npz'), devices=4))
  with worker_group(toy_corpus, tmp_path / 'two', 12, *options, '--dropout', '0.1', '--out', str(tmp_path / 'two.npz'),
                    processes=2, devices=2) as workers:
    two = group_results(workers)
  assert comparable(two[0]) == comparable(two[1])
  assert_same_parameters(tmp_path / 'one.npz', tmp_path / 'two.npz', exact=False)
  # The tokenizer was trained once, by process 0, into the shared workdir.
  assert sorted(p.name for p in (tmp_path / 'two' / 'tokenizer').iterdir()) == ['joint.model']
  assert_same_results(two[0], one)
  for written in ('translations/test.de', 'bleu_statistics.json'):  # Process 0 writes them, as one process does.
    with open(tmp_path / 'two' / written) as f, open(tmp_path / 'one' / written) as g:
      assert f.read() == g.read()


def test_language_model_two_processes_match_one_and_a_killed_pair_resumes_exactly(toy_text, tmp_path):
  """Training windows drawn by batch index, split over hosts; scoring windows of two lengths, split likewise."""
  options = ('--task', 'lm', '--checkpoint_every', '4', '--dropout', '0.1')
  one = worker_results(start_worker(toy_text, tmp_path / 'one', 12, *options, '--out', str(tmp_path / 'one.npz'),
                                    devices=4))
  with worker_group(toy_text, tmp_path / 'two', 12, *options, '--out', str(tmp_path / 'two.npz'), processes=2,
                    devices=2) as workers:
    two = group_results(workers)
  assert comparable(two[0]) == comparable(two[1])
  assert_same_parameters(tmp_path / 'one.npz', tmp_path / 'two.npz', exact=False)
  assert_same_results(two[0], one)
  assert set(one['test']['by_length']) == {'16', '32'}
  with worker_group(toy_text, tmp_path / 'killed', 12, *options, processes=2, devices=2) as workers:
    wait_for(tmp_path / 'killed' / 'checkpoints' / '8', workers[0])
    for worker in workers:
      worker.send_signal(signal.SIGKILL)
    for worker in workers:
      worker.communicate()
  with worker_group(toy_text, tmp_path / 'killed', 12, *options, '--out', str(tmp_path / 'rerun.npz'), processes=2,
                    devices=2) as workers:
    rerun = group_results(workers)
  assert 0 < rerun[0]['steps_this_run'] < 12
  assert_same_parameters(tmp_path / 'two.npz', tmp_path / 'rerun.npz', exact=True)
  assert rerun[0]['test'] == two[0]['test']


def test_both_processes_killed_then_rerun_match_an_uninterrupted_run(tiny_data_dir, listops_runs, tmp_path):
  root, _, uninterrupted = listops_runs
  with worker_group(tiny_data_dir, tmp_path, STEPS, *OPTIONS, processes=2, devices=2) as workers:
    wait_for(tmp_path / 'checkpoints' / '12', workers[0])
    for worker in workers:
      worker.send_signal(signal.SIGKILL)
    for worker in workers:
      worker.communicate()
      assert worker.returncode == -signal.SIGKILL
  rerun = run_group(tiny_data_dir, tmp_path, '--out', str(tmp_path / 'rerun.npz'))
  assert 0 < rerun[0]['steps_this_run'] < STEPS
  assert_same_parameters(root / 'two.npz', tmp_path / 'rerun.npz', exact=True)
  assert rerun[0]['test'] == uninterrupted[0]['test'] and rerun[0]['best_step'] == uninterrupted[0]['best_step']


def test_a_signal_to_one_process_stops_both_at_one_step(tiny_data_dir, tmp_path):
  # SIGTERM; Ctrl-C (SIGINT) takes the same path (tests/test_reliability.py checks its handler).
  with worker_group(tiny_data_dir, tmp_path, 100_000, *OPTIONS, processes=2, devices=2) as workers:
    wait_for(tmp_path / 'checkpoints' / '8', workers[0])
    workers[1].send_signal(signal.SIGTERM)
    stopped = group_results(workers)  # Both exit 0.
  assert [r['status'] for r in stopped] == ['stopped', 'stopped']
  step = stopped[0]['step']
  assert stopped[1]['step'] == step and 8 <= step < 100_000
  kept = sorted(int(p.name) for p in (tmp_path / 'checkpoints').iterdir())
  assert kept[-1] == step
  resumed = run_group(tiny_data_dir, tmp_path, steps=step + 3)
  assert [r['steps_this_run'] for r in resumed] == [3, 3]
  # Then an unreadable newest checkpoint (and best one, where that is newer than the one before, which a
  # resume would otherwise start from): both processes fall back to the one before.
  newest, previous = sorted(int(p.name) for p in (tmp_path / 'checkpoints').iterdir())[:-3:-1]
  best = max(int(p.name) for p in (tmp_path / 'best').iterdir() if p.name.isdigit())
  unreadable = [('checkpoints', newest)] + ([('best', best)] if best > previous else [])
  for directory, step in unreadable:
    for array_file in (tmp_path / directory / str(step) / 'state').rglob('*'):
      if array_file.is_file():
        array_file.write_bytes(b'garbage')
  resumed = run_group(tiny_data_dir, tmp_path, steps=newest + 2)
  assert [r['steps_this_run'] for r in resumed] == [newest + 2 - previous] * 2
  for directory, step in unreadable:
    assert (tmp_path / f'{directory}.unreadable' / str(step) / 'state').is_dir()


# A read that fails on one process alone: as from a host whose mount serves a stale or broken file.
CHECKPOINT_WORKER = """
import json, sys
import numpy as np
from lra_posenc.training import checkpointing, distributed
address, index, workdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
distributed.initialize(coordinator_address=address, num_processes=2, process_id=index, timeout_seconds=60)
state = lambda value: {'w': np.full(3, value, np.float32)}
with checkpointing.Checkpoints(workdir, max_to_keep=3) as checkpoints:
  for step in (4, 8):
    checkpoints.save_latest(step, state(step), {'step': step})
if index == 1:
  restore = checkpointing._restore
  def failing_restore(manager, step, template=None):
    if step == 8:
      raise OSError('step 8 cannot be read on this host')
    return restore(manager, step, template)
  checkpointing._restore = failing_restore
with checkpointing.Checkpoints(workdir, max_to_keep=3) as checkpoints:
  restored, record = checkpoints.restore_newest_readable(state(0), check=lambda step, record: None)
print(json.dumps({'w': restored['w'].tolist(), 'record': record}))
"""


def test_a_checkpoint_one_process_cannot_read_is_passed_over_by_every_process(tmp_path):
  address = f'127.0.0.1:{free_port()}'
  env = os.environ | {'JAX_PLATFORMS': 'cpu'}
  workers = [subprocess.Popen([sys.executable, '-c', CHECKPOINT_WORKER, address, str(index), str(tmp_path)], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for index in (0, 1)]
  try:
    outputs = [worker.communicate(timeout=120) for worker in workers]
  finally:
    for worker in workers:
      if worker.poll() is None:
        worker.kill()
  for worker, (_, stderr) in zip(workers, outputs):
    assert worker.returncode == 0, stderr[-3000:]
  # Both resume from step 4, the newest that every process reads; step 8 is set aside, not deleted.
  assert [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs] == [{'w': [4.0] * 3,
                                                                                    'record': {'step': 4}}] * 2
  assert (tmp_path / 'checkpoints.unreadable' / '8' / 'state').is_dir()


def test_patience_and_averaging_end_every_process_at_one_step(tiny_data_dir, tmp_path):
  # A learning rate of 1e-12 leaves every prediction as it was: patience 3 ends the run at the fourth evaluation.
  options = ('--set', 'optimizer.learning_rate=1e-12', '--set', 'evaluation.every_steps=2', '--set',
             'training.patience=3', '--set', 'evaluation.average_last=2')
  with worker_group(tiny_data_dir, tmp_path, 40, *options, processes=2, devices=2) as workers:
    results = group_results(workers)
  assert [r['training_ended'] for r in results] == [{'reason': 'patience', 'step': 8}] * 2
  assert [r['averaged']['steps'] for r in results] == [[6, 8]] * 2
  assert comparable(results[0]) == comparable(results[1])


# Errors that name what is wrong.

def test_a_batch_the_devices_of_all_processes_do_not_divide_is_named(tiny_data_dir, tmp_path):
  with worker_group(tiny_data_dir, tmp_path, 4, '--batch_size', '6', processes=2, devices=2) as workers:
    for stderr in group_failures(workers):
      assert 'training.batch_size=6 is not divisible by the 4 devices (2 process(es) x 2 local devices)' in stderr


def test_a_workdir_one_process_cannot_write_fails_on_every_process(tiny_data_dir, tmp_path):
  # A relative workdir seen from two working directories: a directory for process 0, a
  # plain file for process 1, as when a host lacks the shared mount.
  (tmp_path / 'host0').mkdir()
  (tmp_path / 'host1').mkdir()
  (tmp_path / 'host1' / 'run').write_text('not a directory')
  with worker_group(tiny_data_dir, 'run', 4, processes=2, devices=2,
                    cwds=[tmp_path / 'host0', tmp_path / 'host1']) as workers:
    primary, other = group_failures(workers)
  assert "writing to workdir 'run' failed on process(es) [1] of 2; see their logs" in primary
  assert "workdir 'run' is not writable" in other


def test_an_unreachable_coordinator_is_named_after_the_timeout():
  address = f'127.0.0.1:{free_port()}'
  code = ('from lra_posenc.training import distributed\n'
          f'distributed.initialize(coordinator_address={address!r}, num_processes=2, process_id=1, timeout_seconds=2)')
  finished = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert finished.returncode == 1
  assert f'ConnectionError: process 1 of 2 could not reach the coordinator at {address}' in finished.stderr


def test_a_process_given_a_device_count_keeps_its_parents_other_xla_flags():
  parent = os.environ | {'XLA_FLAGS': '--xla_force_host_platform_device_count=4 --xla_cpu_enable_fast_math=false'}
  child = distributed.with_xla_flags(parent, '--xla_force_host_platform_device_count=3') | {'JAX_PLATFORMS': 'cpu'}
  assert child['XLA_FLAGS'] == '--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=3'
  assert parent['XLA_FLAGS'].startswith('--xla_force_host_platform_device_count=4')
  finished = subprocess.run([sys.executable, '-c', 'import jax; print(jax.local_device_count())'], env=child,
                            capture_output=True, text=True, timeout=120)
  assert finished.stdout.split() == ['3'], finished.stderr[-2000:]
