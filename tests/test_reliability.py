"""Faults, bad input and bad configs: each is survived or reported, never silently wrong.

Faults are real: processes are killed with SIGKILL and SIGTERM, checkpoint files are
damaged on disk, a NaN is injected into the loss.
"""
import dataclasses
import gzip
import json
import os
import random
import signal
import time
import types

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import (assert_same_parameters, final_params, run_listops, start_worker, tiny_config, wait_for,
                      worker_results)
from lra_posenc.data.files import DataError
from lra_posenc.listops import input_pipeline, train
from lra_posenc.training import checkpointing, distributed, run_files, trainer
from lra_posenc.training.checkpointing import Checkpoints
from lra_posenc.training.task import Task
from lra_posenc.training.trainer import StepWindow
from lra_posenc.translation import input_pipeline as translation_input


# Faults.

@pytest.mark.slow
def test_sigkill_then_rerun_matches_an_uninterrupted_run(tiny_data_dir, tmp_path):
  options = ('--checkpoint_every', '4', '--dropout', '0.1')  # Dropout on: PRNG state must come back too.
  straight = worker_results(start_worker(tiny_data_dir, tmp_path / 'straight', 120, *options,
                                         '--out', str(tmp_path / 'straight.npz')))
  kill_after = random.Random().choice([20, 40, 60])  # Any checkpoint: the run must not care which.
  process = start_worker(tiny_data_dir, tmp_path / 'killed', 120, *options)
  wait_for(tmp_path / 'killed' / 'checkpoints' / str(kill_after), process)
  time.sleep(random.Random().uniform(0.0, 0.2))  # Land anywhere, between checkpoints or inside a save.
  process.send_signal(signal.SIGKILL)
  process.communicate()
  assert process.returncode == -signal.SIGKILL
  with Checkpoints(str(tmp_path / 'killed'), max_to_keep=2) as checkpoints:
    assert checkpoints.latest_step() < 120
  rerun = worker_results(start_worker(tiny_data_dir, tmp_path / 'killed', 120, *options,
                                      '--out', str(tmp_path / 'killed.npz')))
  assert 0 < rerun['steps_this_run'] < 120
  assert_same_parameters(tmp_path / 'straight.npz', tmp_path / 'killed.npz', exact=True)
  assert rerun['test'] == straight['test'] and rerun['best_step'] == straight['best_step']


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_the_rerun_continues(tiny_data_dir, tmp_path):
  process = start_worker(tiny_data_dir, tmp_path, 100_000)
  wait_for(tmp_path / 'checkpoints' / '10', process)
  process.send_signal(signal.SIGTERM)
  results = worker_results(process)
  stopped = results['step']
  assert results['status'] == 'stopped' and 10 <= stopped < 100_000
  with Checkpoints(str(tmp_path), max_to_keep=2) as checkpoints:
    assert checkpoints.latest_step() == stopped
  config = tiny_config(tiny_data_dir, num_train_steps=stopped + 3)
  assert run_listops(config, tmp_path)['steps_this_run'] == 3


@pytest.mark.slow
def test_sigterm_in_the_last_steps_stops_before_testing_and_the_rerun_only_tests(tiny_data_dir, tmp_path):
  """A request after the last agreed read would otherwise be dropped, and the run would go on testing for minutes."""
  config = tiny_config(tiny_data_dir, num_train_steps=12)
  signal_at_step_11 = lambda step: step == 11 and os.kill(os.getpid(), signal.SIGTERM) is not None
  stopped = run_listops(config, tmp_path, should_stop=signal_at_step_11)
  assert stopped == {'status': 'stopped', 'step': 12, 'training_ended': {'reason': 'signal', 'step': 12}}
  assert not (tmp_path / 'results.json').exists()
  with Checkpoints(str(tmp_path), max_to_keep=2) as checkpoints:
    assert checkpoints.latest_step() == 12
  tested = run_listops(config, tmp_path)
  assert tested['status'] == 'finished' and tested['steps_this_run'] == 0 and tested['step'] == 12


@pytest.mark.slow
def test_ctrl_c_while_testing_interrupts_at_once(tiny_data_dir, tmp_path):
  """Nothing polls a stop request once training has ended: Ctrl-C must not be swallowed there."""
  task = train.create_task(tiny_config(tiny_data_dir, num_train_steps=4), str(tmp_path))
  interrupting = Task(**vars(task) | {'score_test': lambda *args: os.kill(os.getpid(), signal.SIGINT) or {}})
  inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    with pytest.raises(KeyboardInterrupt):
      trainer.train_and_evaluate(str(tmp_path), interrupting)
  finally:
    signal.signal(signal.SIGINT, inherited)


def test_ctrl_c_requests_a_stop_and_a_second_one_interrupts_at_once():
  # The second Ctrl-C goes to the handler from before: Python's own here, whatever this process
  # inherited (a background job of a non-interactive shell starts with SIGINT ignored).
  inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    with distributed.StopSignals() as signals:
      os.kill(os.getpid(), signal.SIGINT)
      assert signals.requested()
      with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    assert {signum: signal.getsignal(signum) for signum in before} == before
  finally:
    signal.signal(signal.SIGINT, inherited)


def damage_files(step_dir) -> None:
  """Overwrites every array file of a checkpoint with garbage of the same size."""
  for root, _, files in os.walk(step_dir / 'state'):
    for name in files:
      path = os.path.join(root, name)
      size = os.path.getsize(path)
      with open(path, 'wb') as f:
        f.write(b'\x00garbage' * (size // 8 + 1))


def checkpoint_every_5(data_dir):
  config = tiny_config(data_dir, num_train_steps=15)
  config.checkpoint.every_steps = 5
  config.evaluation.every_steps = 15  # No best checkpoint before the end, to be resumed from instead.
  return config


@pytest.fixture(scope='module')
def uninterrupted(tiny_data_dir, tmp_path_factory):
  """An uninterrupted run of `checkpoint_every_5`: its workdir and results."""
  workdir = tmp_path_factory.mktemp('uninterrupted')
  return workdir, run_listops(checkpoint_every_5(tiny_data_dir), workdir)


@pytest.mark.slow
@pytest.mark.parametrize('damage', ['corrupt files', 'half written'])
def test_damaged_newest_checkpoint_falls_back_to_the_previous_one(tiny_data_dir, uninterrupted, tmp_path, caplog,
                                                                  damage):
  config = checkpoint_every_5(tiny_data_dir)
  straight_workdir, straight = uninterrupted
  workdir = tmp_path / 'damaged'
  assert run_listops(config, workdir, should_stop=lambda step: step == 10) == {
      'status': 'stopped', 'step': 10, 'training_ended': {'reason': 'stop_request', 'step': 10}}
  newest = workdir / 'checkpoints' / '10'
  if damage == 'corrupt files':
    damage_files(newest)
  else:  # As Orbax leaves a write cut short: no commit marker, under a temporary name.
    (newest / 'commit_success.txt').unlink()
    newest.rename(workdir / 'checkpoints' / '10.orbax-checkpoint-tmp-1234')
  caplog.set_level('WARNING')
  resumed = run_listops(config, workdir)
  assert resumed['steps_this_run'] == 10  # From step 5.
  chex.assert_trees_all_equal(final_params(straight_workdir, 15), final_params(workdir, 15))
  assert resumed['test'] == straight['test']
  if damage == 'corrupt files':
    assert 'checkpoint at step 10 cannot be restored' in caplog.text
    kept = workdir / 'checkpoints.unreadable' / '10'
    assert f'moved the unreadable checkpoint of step 10 to {kept}' in caplog.text
    assert (kept / 'state').is_dir()  # Set aside, not deleted.


class Crash(Exception):
  """A fault between two checkpoints, as a kill would land."""


def crash_at(crash_step: int):
  """A `should_stop` that raises Crash at `crash_step`."""
  def should_stop(step):
    if step == crash_step:
      raise Crash
    return False
  return should_stop


def scored_by_the_clock(task: Task, sign: float) -> Task:
  """`task` with validation accuracy `sign` x the clock: with +1 every evaluation is a new best, with -1 only
  the first, whatever the parameters."""
  return Task(**vars(task) | {'score_validation': lambda params: {'accuracy': sign * time.monotonic()}})


def evaluated_every_5(data_dir):
  config = tiny_config(data_dir, num_train_steps=20)  # Checkpoints every 10.
  config.evaluation.update(every_steps=5, average_last=2)
  return config


@pytest.mark.slow
@pytest.mark.parametrize('damaged', [False, True])
def test_a_best_checkpoint_newer_than_the_latest_is_resumed_from(tiny_data_dir, tmp_path, caplog, damaged):
  config = evaluated_every_5(tiny_data_dir)
  straight = tmp_path / 'straight'
  trainer.train_and_evaluate(str(straight), scored_by_the_clock(train.create_task(config, str(straight)), +1))
  workdir = tmp_path / 'crashed'
  task = scored_by_the_clock(train.create_task(config, str(workdir)), +1)
  with pytest.raises(Crash):
    trainer.train_and_evaluate(str(workdir), task, crash_at(17))
  with Checkpoints(str(workdir), max_to_keep=2) as checkpoints:
    assert (checkpoints.latest_step(), checkpoints.best_step()) == (10, 15)
  if damaged:
    damage_files(workdir / 'best' / '15')
  caplog.set_level('INFO')
  resumed = trainer.train_and_evaluate(str(workdir), task)
  if damaged:  # Set aside, and the run goes on from the latest checkpoint, saving its new bests.
    assert resumed['steps_this_run'] == 10 and (workdir / 'best.unreadable' / '15' / 'state').is_dir()
  else:
    assert 'the best checkpoint (step 15) is newer than any latest one; resuming from it' in caplog.text
    assert resumed['steps_this_run'] == 5
  assert resumed['best_step'] == 20
  chex.assert_trees_all_equal(final_params(straight, 20), final_params(workdir, 20))


@pytest.mark.slow
def test_evaluations_after_the_resumed_step_are_set_aside_and_made_again(tiny_data_dir, tmp_path, caplog):
  config = evaluated_every_5(tiny_data_dir)
  straight = tmp_path / 'straight'
  expected = trainer.train_and_evaluate(str(straight), scored_by_the_clock(train.create_task(config, str(straight)),
                                                                           -1))
  workdir = tmp_path / 'crashed'
  task = scored_by_the_clock(train.create_task(config, str(workdir)), -1)  # The best stays at step 5.
  with pytest.raises(Crash):
    trainer.train_and_evaluate(str(workdir), task, crash_at(17))  # Evaluated 10 and 15; latest 10.
  caplog.set_level('WARNING')
  resumed = trainer.train_and_evaluate(str(workdir), task)
  superseded = workdir / 'evaluated.superseded' / '15'
  assert f'moved the superseded checkpoint of step 15 to {superseded}' in caplog.text and superseded.is_dir()
  assert resumed['steps_this_run'] == 10 and resumed['best_step'] == expected['best_step'] == 5
  assert resumed['averaged']['steps'] == [15, 20] and resumed['averaged']['test'] == expected['averaged']['test']


def test_a_save_orbax_would_decline_is_an_error(tmp_path):
  with Checkpoints(str(tmp_path), max_to_keep=2) as checkpoints:
    checkpoints.save_best(8, {'w': np.ones(2, np.float32)}, {'step': 8})
    with pytest.raises(RuntimeError, match=r'best: Orbax declined to save step 4 \(steps held: \[8\]\)'):
      checkpoints.save_best(4, {'w': np.zeros(2, np.float32)}, {'step': 4})


@pytest.mark.slow
def test_non_finite_loss_stops_the_run_and_keeps_good_checkpoints(tiny_data_dir, tmp_path):
  config = tiny_config(tiny_data_dir, num_train_steps=30)
  config.checkpoint.every_steps = 5
  task = train.create_task(config, str(tmp_path))

  def poisoned_batches(start):  # Global batch 12 (step 13) makes the loss NaN.
    for index, batch in enumerate(task.train_batches(start), start):
      yield batch | {'poison': np.full(len(batch['weight']), float(index == 12), np.float32)}

  def poisoned_metrics(params, batch, rng):
    metrics = task.metrics(params, batch, rng)
    poison = batch['poison'].sum() if 'poison' in batch else 0.0
    return metrics | {'loss': metrics['loss'] + jnp.where(poison > 0, jnp.nan, 0.0)}

  poisoned = Task(**vars(task) | {'train_batches': poisoned_batches, 'metrics': poisoned_metrics})
  with pytest.raises(FloatingPointError, match=r'non-finite loss or gradients at step 13; stopped at step 15 '
                                               r'without saving; the latest checkpoint \(step 10\)'):
    trainer.train_and_evaluate(str(tmp_path), poisoned)
  assert sorted(int(step) for step in os.listdir(tmp_path / 'checkpoints')) == [5, 10]
  with Checkpoints(str(tmp_path), max_to_keep=2) as checkpoints:
    best_step, _, record = checkpoints.restore_best()
    state, _ = checkpoints.restore(10)
  assert best_step == 10 and np.isfinite(record['best']['score'])
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(state['params']))


def test_a_non_finite_step_before_any_checkpoint_says_none_is_kept():
  window = StepWindow(0, {'first_non_finite': jnp.asarray([2], jnp.int32)})  # Third step of the window.
  with pytest.raises(FloatingPointError, match=r'at step 3; stopped at step 5 without saving; no checkpoint was '
                                               r'saved before it\. .* re-run to start again$'):
    window.raise_if_non_finite(5, types.SimpleNamespace(latest_step=lambda: None))


def test_a_json_write_cut_short_leaves_the_file_as_it_was(tmp_path):
  path = tmp_path / 'record.json'
  run_files.write_json(str(path), {'kept': 1})
  with pytest.raises(TypeError):  # json.dump fails halfway through writing.
    run_files.write_json(str(path), {'first': list(range(1000)), 'second': object()})
  assert json.loads(path.read_text()) == {'kept': 1} and os.listdir(tmp_path) == ['record.json']


@pytest.mark.parametrize('umask', [0o022, 0o077, 0o002])
def test_a_json_write_gets_the_permissions_a_plain_open_gives(tmp_path, umask):
  previous = os.umask(umask)
  try:
    run_files.write_json(str(tmp_path / 'results.json'), {'score': 1})
    (tmp_path / 'plain.json').write_text('{}')
  finally:
    os.umask(previous)
  mode = lambda name: os.stat(tmp_path / name).st_mode & 0o777
  assert mode('results.json') == mode('plain.json') == 0o666 & ~umask


def test_unwritable_workdir_fails_at_start(tiny_data_dir, tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a directory')
  config = tiny_config(tiny_data_dir)
  with pytest.raises(OSError, match=f"workdir '{blocker}/run' is not writable"):
    run_files.prepare_workdir(str(blocker / 'run'))
  with pytest.raises(OSError, match='is not writable'):
    trainer.train_and_evaluate(str(blocker / 'run'), train.create_task(config, str(tmp_path / 'ok')))


def test_full_disk_fails_before_training(tiny_data_dir, tmp_path, monkeypatch):
  config = tiny_config(tiny_data_dir)
  task = train.create_task(config, str(tmp_path))
  monkeypatch.setattr(run_files.shutil, 'disk_usage', lambda path: types.SimpleNamespace(total=10**9, used=10**9, free=10**4))
  with pytest.raises(OSError, match=r'has 0.0 MiB free, but 2 latest checkpoints, the best one, one being '
                                    r'written and 0 evaluated parameter sets need about [\d.]+ MiB more than the '
                                    r'0.0 MiB its checkpoints hold'):
    trainer.train_and_evaluate(str(tmp_path), task)
  assert not (tmp_path / 'checkpoints').exists() or not os.listdir(tmp_path / 'checkpoints')


@pytest.mark.slow
def test_a_resume_counts_the_space_its_checkpoints_hold(tiny_data_dir, tmp_path, monkeypatch):
  config = tiny_config(tiny_data_dir, num_train_steps=4)
  run_listops(config, tmp_path, should_stop=lambda step: step == 2)
  task = train.create_task(config, str(tmp_path))
  state_bytes = sum(jnp.asarray(x).nbytes for x in jax.tree.leaves(trainer.create_state(task, jax.random.PRNGKey(0))))
  held = checkpointing.bytes_held(str(tmp_path))
  assert held > 0
  needed = 4 * state_bytes - held  # 2 latest, the best and one being written, less what is held.
  monkeypatch.setattr(run_files.shutil, 'disk_usage', lambda path: types.SimpleNamespace(free=needed - 1))
  with pytest.raises(OSError, match=r'need about [\d.]+ MiB more than the [\d.]+ MiB its checkpoints hold'):
    trainer.train_and_evaluate(str(tmp_path), task)
  monkeypatch.setattr(run_files.shutil, 'disk_usage', lambda path: types.SimpleNamespace(free=needed))
  assert trainer.train_and_evaluate(str(tmp_path), task)['steps_this_run'] == 2


@pytest.mark.slow
def test_resume_refuses_another_vocabulary_model_or_selection_metric_and_allows_more_steps(tiny_data_dir, tmp_path):
  config = tiny_config(tiny_data_dir, num_train_steps=4)
  config.evaluation.every_steps = 2  # The checkpoint at step 2 holds a best evaluation.
  run_listops(config, tmp_path, should_stop=lambda step: step == 2)
  with open(tmp_path / 'artifacts.json') as f:
    assert json.load(f)['vocab'][:3] == ['<pad>', '0', '1']
  task = train.create_task(config, str(tmp_path))
  shuffled = task.artifacts | {'vocab': task.artifacts['vocab'][::-1]}
  with pytest.raises(ValueError, match='different vocabulary'):
    trainer.train_and_evaluate(str(tmp_path), Task(**vars(task) | {'artifacts': shuffled}))
  by_loss = dataclasses.replace(task.settings, evaluation=dataclasses.replace(task.settings.evaluation,
                                                                               selection_metric='loss'))
  with pytest.raises(ValueError, match=r"chose its best evaluation \(step 2\) by validation accuracy, but "
                                       r"evaluation.selection_metric='loss'"):
    trainer.train_and_evaluate(str(tmp_path), Task(**vars(task) | {'settings': by_loss}))
  config.model.update(pos_encoding='legendre', num_layers=2)
  with pytest.raises(ValueError, match=r"differing keys: model.num_layers \(1 -> 2\), "
                                       r"model.pos_encoding \('sinusoidal' -> 'legendre'\). A new model needs a "
                                       r"new --workdir"):
    run_listops(config, tmp_path)
  config.model.update(pos_encoding='sinusoidal', num_layers=1)
  config.seed = 1
  with pytest.raises(ValueError, match=r'checkpoint at step 2 was trained with another config.seed'):
    run_listops(config, tmp_path)
  config.seed = 0
  config.training.num_train_steps = 6  # Training hyper-parameters may change.
  assert run_listops(config, tmp_path)['steps_this_run'] == 4


@pytest.mark.slow
def test_a_finished_run_trained_further_sets_its_results_and_config_aside(tiny_data_dir, tmp_path):
  config = tiny_config(tiny_data_dir, num_train_steps=4)
  first = run_listops(config, tmp_path)
  finished = (tmp_path / 'results.json').read_text()
  config.training.num_train_steps = 8
  assert run_listops(config, tmp_path, should_stop=lambda step: step == 6)['status'] == 'stopped'
  assert not (tmp_path / 'results.json').exists()  # A comparison reads a results.json as a finished run.
  assert (tmp_path / 'results.step_4.json').read_text() == finished and first['step'] == 4
  steps_in = lambda name: json.loads((tmp_path / name).read_text())['training']['num_train_steps']
  assert steps_in('config.step_4.json') == 4 and steps_in('config.json') == 8  # Each config that trained is kept.
  assert run_listops(config, tmp_path)['step'] == json.loads((tmp_path / 'results.json').read_text())['step'] == 8
  assert sorted(path.name for path in tmp_path.glob('config*.json')) == ['config.json', 'config.step_4.json']


@pytest.mark.slow
@pytest.mark.parametrize('edit, message', [
    (lambda config: config.data.update(max_length=32),  # The learned table: data.max_length + 1 positions.
     r'holds parameters of other shapes than this config builds \(.*\(25, 32\) -> \(33, 32\)\): a key outside '
     '`model`'),
    (lambda config: config.optimizer.update(grad_clip_norm=1.0),  # One more level in the optimizer state.
     r'holds an optimizer state of another structure than this config builds.*optimizer\.grad_clip_norm'),
], ids=['parameters', 'optimizer'])
def test_resume_refuses_a_healthy_checkpoint_built_otherwise_and_sets_nothing_aside(tiny_data_dir, tmp_path, edit,
                                                                                    message):
  """A checkpoint this config cannot hold is another run's, to be refused by name, not taken for damaged files."""
  config = tiny_config(tiny_data_dir, num_train_steps=4)
  config.model.pos_encoding = 'learned'
  run_listops(config, tmp_path, should_stop=lambda step: step == 2)
  edit(config)
  with pytest.raises(ValueError, match='checkpoint at step 2 ' + message):
    run_listops(config, tmp_path)
  assert os.listdir(tmp_path / 'checkpoints') == ['2'] and not os.path.exists(tmp_path / 'checkpoints.unreadable')


# Bad input.

BAD_ROWS = {
    '( [MAX 2 ] )\t9\textra': 'wrong column count',
    '( [MAX 2 ] )\tnine': 'label not an integer',
    '( [MAX 2 ] )\t10': 'label out of range',
    '( [MAX 2 ] )\t-1': 'label out of range',
    '( [MAXX 2 ] )\t2': 'unknown token',
    '[MAX 1 2 3 4 5 6 7 8 9 ]\t9': 'too long',
    '( )\t1': 'empty expression',
}


@pytest.mark.parametrize('row,reason', BAD_ROWS.items())
def test_bad_rows_name_file_and_line(tmp_path, row, reason):
  path = tmp_path / 'basic_train.tsv'
  path.write_text(f'Source\tTarget\n[MAX 1 ]\t1\n{row}\n')
  with pytest.raises(DataError, match=f'{path}:3: {reason}.*; to skip such rows, run with '
                                      r'--config.data.on_invalid=skip$'):
    input_pipeline.read_split(str(path), max_length=8, num_classes=10)
  dataset, report = input_pipeline.read_split(str(path), max_length=8, num_classes=10, on_invalid='skip')
  assert dataset.size == 1 and report.skipped == {reason: 1}
  assert report.describe() == f"{path}: 1 examples; skipped {{'{reason}': 1}} at line(s) 3"


def test_skipping_reports_the_first_skipped_lines(tmp_path):
  path = tmp_path / 'basic_train.tsv'
  rows = ['[MAX 1 ]\t1' if i % 3 == 0 else '[MAXX 1 ]\t1' for i in range(20)]  # Bad at lines 3, 4, 6, 7, 9, ...
  path.write_text('Source\tTarget\n' + '\n'.join(rows) + '\n')
  _, report = input_pipeline.read_split(str(path), max_length=8, num_classes=10, on_invalid='skip')
  assert report.describe() == f"{path}: 7 examples; skipped {{'unknown token': 13}} at line(s) 3, 4, 6, 7, 9, ..."


@pytest.mark.parametrize('content,message', [
    (b'', ':1: empty file'), (b'Input\tLabel\n', ':1: expected the header'),
    (b'Source\tTarget\n', ':1: no examples'), (b'Source\tTarget\n[MAX 1 ]\t1\n[MAX \xff ]\t1\n', ':3: invalid UTF-8'),
])
def test_bad_files_are_located(tmp_path, content, message):
  path = tmp_path / 'basic_val.tsv'
  path.write_bytes(content)
  with pytest.raises(DataError, match=f'{path}{message}'):
    input_pipeline.read_split(str(path), max_length=8, num_classes=10)


def test_missing_file_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match='basic_train.tsv'):
    input_pipeline.read_splits(str(tmp_path), max_length=8, num_classes=10, on_invalid='raise')


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('()[]MAXINEDS0123456789\t -x')), max_size=30))
def test_random_rows_are_read_or_rejected_with_location(tmp_path_factory, row):
  path = tmp_path_factory.mktemp('fuzz') / 'basic_train.tsv'
  path.write_text(f'Source\tTarget\n{row}\n[MAX 1 ]\t1\n')
  try:
    dataset, _ = input_pipeline.read_split(str(path), max_length=16, num_classes=10)
  except DataError as error:
    assert str(error).startswith(f'{path}:2: ')
    return
  assert dataset.size in (1, 2)
  assert ((dataset.arrays['targets'] >= 0) & (dataset.arrays['targets'] < 10)).all()


def test_mismatched_line_counts_name_both_files(tmp_path):
  (tmp_path / 'train.en').write_text('a\nb\nc\n')
  with gzip.open(tmp_path / 'train.de.gz', 'wt') as f:
    f.write('x\ny\n')
  with pytest.raises(DataError, match=r'3 lines in .*train\.en but 2 lines in .*train\.de\.gz'):
    translation_input.read_split(str(tmp_path), 'train', 'en', 'de')
  with pytest.raises(FileNotFoundError, match=r"no fr file for split 'train'"):
    translation_input.read_split(str(tmp_path), 'train', 'en', 'fr')


def test_invalid_utf8_is_located(tmp_path):
  (tmp_path / 'val.en').write_bytes(b'fine\nbad \xff byte\n')
  (tmp_path / 'val.de').write_text('gut\nschlecht\n')
  with pytest.raises(DataError, match=r'val\.en:2: invalid UTF-8 at byte 4'):
    translation_input.read_split(str(tmp_path), 'val', 'en', 'de')

@pytest.mark.parametrize('split', ['train', 'val'])
def test_missing_translation_files_and_directories_are_named(tmp_path, split):
  with pytest.raises(FileNotFoundError, match=f"no en file for split '{split}': tried .*{split}.en.gz"):
    translation_input.read_split(str(tmp_path / 'absent'), split, 'en', 'de')


def test_empty_parallel_files_are_rejected(tmp_path):
  (tmp_path / 'train.en').write_text('')
  (tmp_path / 'train.de').write_text('')
  with pytest.raises(DataError, match=r'train\.en:0: empty file'):
    translation_input.read_split(str(tmp_path), 'train', 'en', 'de')


def test_corrupt_gzip_is_named(tmp_path):
  (tmp_path / 'train.en.gz').write_bytes(gzip.compress(b'a\nb\n')[:-12])
  (tmp_path / 'train.de').write_text('x\ny\n')
  with pytest.raises(DataError, match=r'train\.en\.gz:0: corrupt gzip file'):
    translation_input.read_split(str(tmp_path), 'train', 'en', 'de')


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=12).filter(lambda b: b'\n' not in b and b'\r' not in b), min_size=1, max_size=5),
       st.integers(0, 2))
def test_random_parallel_bytes_are_read_aligned_or_rejected_with_location(tmp_path_factory, lines, extra_lines):
  directory = tmp_path_factory.mktemp('parallel')
  (directory / 'train.en').write_bytes(b''.join(line + b'\n' for line in lines))
  (directory / 'train.de').write_bytes(b''.join(line[::-1] + b'\n' for line in lines) + b'x\n' * extra_lines)
  try:
    text = translation_input.read_split(str(directory), 'train', 'en', 'de')
  except DataError as error:
    assert str(error).startswith(str(directory / 'train.'))
    assert extra_lines or 'invalid UTF-8' in str(error)
    return
  assert not extra_lines and text.sources == [line.decode('utf-8') for line in lines]


# Bad configs: rejected before any compilation, naming the key.

@pytest.mark.parametrize('edit,message', [
    (lambda c: c.model.update(pos_encoding='fourier'), r"model.pos_encoding='fourier' is not a known encoding"),
    (lambda c: c.model.update(pooling='max'), r"model.pooling='max' is not one of \['cls', 'mean'\]"),
    (lambda c: c.model.update(num_heads=3), 'model.qkv_dim=32 is not divisible by model.num_heads=3'),
    (lambda c: c.model.update(pos_encoding='rope', num_heads=32), 'even head dimension'),
    (lambda c: c.training.update(num_train_steps=0), 'training.num_train_steps=0 must be > 0'),
    (lambda c: c.training.update(num_train_steps=-5), r'training.num_train_steps=-5 must be > 0'),
    (lambda c: c.training.update(batch_size=15), r'training.batch_size=15 is not divisible by the 4 devices'),
    (lambda c: c.evaluation.update(every_steps=0), 'evaluation.every_steps=0 must be > 0'),
    (lambda c: c.update(seed=-1), r'seed=-1 must be >= 0 and < 4294967296'),
    (lambda c: c.update(seed=2**32), r'seed=4294967296 must be >= 0 and < 4294967296'),
    (lambda c: c.optimizer.update(schedule='linear'), r"optimizer.schedule='linear' is not one of"),
    (lambda c: c.data.update(on_invalid='ignore'), r"data.on_invalid='ignore' is not one of"),
    (lambda c: c.data.update(data_dir='', max_length=20),
     r'data.generator.shorter_than=64 would write expressions of up to 63 tokens, more than data.max_length=20'),
    (lambda c: c.model.pos_encoding_options.chebyshev.update(max_len=10),
     'chebyshev.max_len is set but'),
    (lambda c: c.model.update(pos_encoding='chebyshev') or c.model.pos_encoding_options.chebyshev.update(max_len=10),
     'chebyshev.max_len=10 is shorter than'),
    (lambda c: c.model.update(pos_encoding='chebyshev') or c.model.pos_encoding_options.chebyshev.update(
        position_offset=2), r'chebyshev.position_offset=2 needs chebyshev.max_len >= 27: with max_len 0'),
])
def test_invalid_configs_fail_before_training(tiny_data_dir, tmp_path, monkeypatch, edit, message):
  monkeypatch.setattr(jax, 'device_count', lambda: 4)  # As with four devices.
  config = tiny_config(tiny_data_dir)
  edit(config)
  with pytest.raises(ValueError, match=message):
    train.create_task(config, str(tmp_path))
  assert not os.path.exists(tmp_path / 'checkpoints')


def test_unknown_config_key_is_rejected(tiny_data_dir, tmp_path):
  config = tiny_config(tiny_data_dir)
  with config.unlocked():
    config.training.warmup = 100
  with pytest.raises(ValueError, match=r'training.warmup is not a config key the code reads'):
    train.create_task(config, str(tmp_path))


def test_a_renamed_config_key_names_its_replacement(tiny_data_dir, tmp_path):
  config = tiny_config(tiny_data_dir)
  with config.unlocked():
    config.data.generator.max_length = 30
  with pytest.raises(ValueError, match=r'data.generator.max_length was renamed; use data.generator.shorter_than '
                                       r'\(exclusive, as in LRA; data.max_length is inclusive\)'):
    train.create_task(config, str(tmp_path))


