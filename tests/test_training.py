"""The shared trainer on ListOps: learning, resume equivalence, device parity, the LRA config."""
import datetime
import functools
import json
import logging
import os
import re
import shutil
import subprocess

import chex
import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax.training import train_state
from conftest import assert_same_parameters, final_params, run_listops, start_worker, tiny_config, worker_results

from configs.listops import lra
from lra_posenc.listops import train
from lra_posenc.listops import settings as listops_settings
from lra_posenc.training import checkpointing, run_files, trainer
from lra_posenc.training.checkpointing import Checkpoints, restore_evaluated
from lra_posenc.training.distributed import AXIS, device_batches, stop_requests
from lra_posenc.training.run_files import read_history
from lra_posenc.training.settings import read_trainer_settings
from lra_posenc.training.task import Task
from lra_posenc.training.trainer import evaluate, pmapped_steps, train_step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_tiny_run_learns_and_reports_best_checkpoint(tiny_data_dir, tmp_path):
  config = tiny_config(tiny_data_dir, num_train_steps=300, log_every_steps=100)
  config.evaluation.every_steps = 100
  config.checkpoint.every_steps = 100
  task = train.create_task(config, str(tmp_path))
  _, p_eval_step = pmapped_steps(task)
  initial_params = jax.jit(task.init_params)(jax.random.PRNGKey(0))
  initial = evaluate(p_eval_step, flax.jax_utils.replicate(initial_params), task.eval_batches('train'))
  results = trainer.train_and_evaluate(str(tmp_path), task)
  trained = evaluate(p_eval_step, flax.jax_utils.replicate(final_params(tmp_path, 300)),
                     task.eval_batches('train'))
  assert trained['loss'] < 0.75 * initial['loss']
  # Held out: clearly better than the best constant predictor (the label entropy, ~2.29 nats).
  labels = np.concatenate([b['targets'][b['weight'] > 0] for b in task.eval_batches('train')])
  frequencies = np.bincount(labels) / len(labels)
  entropy = -(frequencies[frequencies > 0] * np.log(frequencies[frequencies > 0])).sum()
  assert results['validation']['loss'] < entropy - 0.4
  assert results['test']['accuracy'] > 2 * results['baselines']['test_majority_class_accuracy']
  with open(tmp_path / 'results.json') as f:
    written = json.load(f)
  assert written['test'] == results['test'] and written['best_step'] in (100, 200, 300)
  # The test score is the best checkpoint's, and no kept checkpoint validates better.
  with Checkpoints(str(tmp_path), max_to_keep=2) as checkpoints:
    best_step, best_state, _ = checkpoints.restore_best()
  assert best_step == written['best_step']
  rescored = evaluate(p_eval_step, flax.jax_utils.replicate(best_state['params']), task.eval_batches('test'))
  assert rescored == pytest.approx(written['test'])
  for step in (200, 300):  # The latest two, kept by checkpoint.max_to_keep, both validated.
    validation = evaluate(p_eval_step, flax.jax_utils.replicate(final_params(tmp_path, step)),
                          task.eval_batches('validation'))
    assert validation['accuracy'] <= written['validation']['accuracy']
  assert written['config']['model']['pos_encoding'] == 'sinusoidal'
  # 'auto' attention on a CPU: XLA, and the run says why.
  assert written['attention'] == {'encoder self-attention': {
      'implementation': 'xla', 'reason': 'cuDNN fused attention needs an NVIDIA GPU; the device is cpu (cpu)'}}
  # Provenance: the code's commit, as git itself tells it, the packages and devices that ran.
  record = written['provenance']
  head = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=ROOT, capture_output=True, text=True).stdout.strip()
  assert record['git_commit'] == (head or None) and isinstance(record['git_dirty'], bool)
  assert record['packages']['jax'] == jax.__version__ and record['packages']['flax'] == flax.__version__
  assert record['devices']['count'] == jax.device_count() and record['process_count'] == 1
  assert record['host_cpu'] == run_files.host_cpu()  # What timed train_seconds.
  age = datetime.datetime.now(datetime.timezone.utc) - datetime.datetime.fromisoformat(record['date'])
  assert datetime.timedelta(0) <= age < datetime.timedelta(hours=1)
  assert os.listdir(tmp_path / 'tensorboard')


@pytest.mark.slow
def test_logged_norms_are_those_of_the_saved_parameters_and_gradient(tiny_data_dir, tmp_path):
  config = tiny_config(tiny_data_dir, num_train_steps=3, log_every_steps=1)
  config.checkpoint.update(every_steps=1, max_to_keep=4)
  task = train.create_task(config, str(tmp_path))
  trainer.train_and_evaluate(str(tmp_path), task)
  logged = {r['step']: r for r in read_history(str(tmp_path), 'train')}
  params = {step: final_params(tmp_path, step) for step in (2, 3)}
  norm = lambda tree: float(optax.tree.norm(tree))
  assert logged[3]['param_norm'] == pytest.approx(norm(params[3]), rel=1e-6)
  assert logged[3]['update_norm'] == pytest.approx(norm(jax.tree.map(np.subtract, params[3], params[2])), rel=1e-4)
  # Step 3's gradient: the mean loss of global batch 2 at the parameters after step 2.
  batch = next(task.train_batches(2))
  mean_loss = lambda p: (lambda m: m['loss'] / m['count'])(task.metrics(p, batch, jax.random.PRNGKey(0)))
  assert logged[3]['grad_norm'] == pytest.approx(norm(jax.grad(mean_loss)(params[2])), rel=1e-4)


@pytest.mark.slow
def test_four_devices_match_one(tiny_data_dir, tmp_path):
  outputs = {}
  for devices in (1, 4):
    npz = tmp_path / f'params_{devices}.npz'
    report = worker_results(start_worker(tiny_data_dir, tmp_path / f'work_{devices}', 6, '--out', str(npz),
                                         devices=devices))
    assert report['devices'] == devices
    outputs[devices] = report
  # Same global batch, gradients summed in a different order: float32 rounding only.
  np.testing.assert_allclose(outputs[4]['test']['loss'], outputs[1]['test']['loss'], rtol=1e-5)
  assert_same_parameters(tmp_path / 'params_1.npz', tmp_path / 'params_4.npz', exact=False)


def test_lra_standard_config_validates_and_runs_a_forward_pass():
  config = lra.get_config()
  read_trainer_settings(config, 'listops')
  with pytest.raises(ValueError, match=r"config.task='listops', but this program trains 'translation'"):
    read_trainer_settings(config, 'translation')
  model = listops_settings.create_model(config)
  shape = (model.config.num_layers, model.config.emb_dim, model.config.num_heads, model.config.mlp_dim)
  assert shape == (4, 512, 8, 1024)
  assert model.config.max_len == 2001  # 2000 tokens and the CLS position.
  tokens = np.ones((1, config.data.max_length), np.int32)
  logits = jax.jit(lambda t: model.init_with_output({'params': jax.random.PRNGKey(0)}, t, train=False)[0])(tokens)
  assert logits.shape == (1, 10) and np.isfinite(logits).all()


def test_the_classifiers_own_keys_are_its_fields_and_reach_it():
  config = lra.get_config('cpu')
  config.model.update(pooling='mean', classifier_dim=24, pos_encoding_placement='after_encoder',
                      pos_encoding='sinusoidal', randomized_positions=128, length_multiple=8)
  model = listops_settings.create_model(config)
  assert listops_settings.OWN_MODEL_KEYS == ('pooling', 'classifier_dim', 'pos_encoding_placement',
                                             'randomized_positions', 'length_multiple')
  assert (model.pooling, model.classifier_dim, model.pos_encoding_placement, model.randomized_positions,
          model.length_multiple) == ('mean', 24, 'after_encoder', 128, 8)
  config.model.pad_id = 1  # A field the task derives is no key.
  with pytest.raises(ValueError, match='model.pad_id is not a config key the code reads'):
    listops_settings.create_model(config)


def test_a_sequence_without_its_batch_axis_is_named_at_the_model_boundary():
  model = listops_settings.create_model(lra.get_config('cpu'))
  with pytest.raises(AssertionError, match=r'rank 1 \(shape \(64,\)\) but expected 2'):
    model.init(jax.random.PRNGKey(0), np.ones(64, np.int32), train=False)
  with pytest.raises(AssertionError, match='assert_type'):
    model.init(jax.random.PRNGKey(0), np.ones((1, 64), np.float32), train=False)


def dot_operand_dtypes(fn, *args) -> list[tuple[int, str]]:
  """(rank of the product's output, dtype of its first operand) of every matrix product in `fn`."""
  return [(eqn.outvars[0].aval.ndim, str(eqn.invars[0].aval.dtype)) for eqn in jax.make_jaxpr(fn)(*args).jaxpr.eqns
          if eqn.primitive.name == 'dot_general']


@pytest.mark.slow
@pytest.mark.parametrize('pos_encoding', ['legendre', 'alibi'])
def test_bfloat16_multiplies_in_bfloat16_and_keeps_float32_parameters(pos_encoding):
  config = lra.get_config('cpu')
  config.model.update(pos_encoding=pos_encoding, attention_dropout_rate=0.1)
  tokens = np.random.default_rng(0).integers(1, 16, (2, 64)).astype(np.int32)
  params = listops_settings.create_model(config).init(jax.random.PRNGKey(0), tokens, train=False)['params']
  logits = {}
  for dtype in ('float32', 'bfloat16'):
    config.model.dtype = dtype
    model = listops_settings.create_model(config)
    assert all(p.dtype == np.float32 for p in jax.tree.leaves(model.init(jax.random.PRNGKey(0), tokens,
                                                                        train=False)))
    logits[dtype] = model.apply({'params': params}, tokens, train=False)
    # With dropout on, attention takes the explicit path; its logits accumulate in float32 too.
    operands = dot_operand_dtypes(lambda p: model.apply({'params': p}, tokens, train=True,
                                                        rngs={'dropout': jax.random.PRNGKey(1)}), params)
    # Products over [batch, length, ...] activations (projections, attention, MLP) run in `dtype`; the
    # classifier head's, over pooled [batch, features], stay float32.
    assert {d for rank, d in operands if rank >= 3} == {dtype}
    assert [d for rank, d in operands if rank == 2] == ['float32'] * 2
  assert logits['bfloat16'].dtype == np.float32
  np.testing.assert_allclose(logits['bfloat16'], logits['float32'], atol=0.05)


@pytest.mark.slow
def test_bfloat16_training_tracks_float32(tiny_data_dir, tmp_path):
  losses = {}
  for dtype in ('float32', 'bfloat16'):
    config = tiny_config(tiny_data_dir, num_train_steps=40, log_every_steps=10)
    config.model.dtype = dtype
    results = run_listops(config, tmp_path / dtype)
    losses[dtype] = [r['loss'] for r in read_history(str(tmp_path / dtype), 'train')] + [results['test']['loss']]
  # bfloat16 rounds to 3 significant digits; over 40 steps the curves stay within a few percent.
  np.testing.assert_allclose(losses['bfloat16'], losses['float32'], rtol=0.03)
  assert losses['float32'][-2] < losses['float32'][0]


@pytest.mark.parametrize('weights, finite', [((1.0, 2.0), True), ((1.0, -1.0), False)])
def test_a_step_with_a_non_finite_gradient_and_a_finite_loss_leaves_the_state_as_it_was(weights, finite):
  def metrics(params, batch, rng):  # sqrt's gradient at -1 is NaN; the where keeps the loss finite.
    w = params['w']
    return {'loss': jnp.where(w > 0, jnp.sqrt(w), 0.0).sum(), 'count': jnp.ones(())}

  task = Task(metrics=metrics, init_params=None, train_batches=None, eval_batches=None, artifacts={}, baselines={},
              settings=read_trainer_settings(lra.get_config('cpu'), 'listops'))
  state = train_state.TrainState.create(apply_fn=None, params={'w': jnp.array(weights)}, tx=optax.adam(0.1))
  step = jax.pmap(lambda s, r, stop: train_step(s, {}, r, stop, task=task), axis_name=AXIS,
                  devices=jax.local_devices()[:1])
  expand = lambda tree: jax.tree.map(lambda x: np.asarray(x)[None], tree)
  new, _, info = step(expand(state), expand(jax.random.PRNGKey(0)), np.zeros(1, bool))
  assert bool(info['finite'][0]) == finite and np.isfinite(info['grad_norm'][0]) == finite
  if finite:  # Adam's first step moves each weight by the learning rate against its gradient's sign (sqrt: +).
    np.testing.assert_allclose(np.asarray(new.params['w'])[0], np.array(weights) - 0.1, rtol=1e-6)
  else:
    assert all(jax.tree.leaves(jax.tree.map(lambda a, b: np.array_equal(np.asarray(a)[0], b), new, state)))
  assert int(new.step[0]) == int(finite)


@pytest.mark.skipif(jax.default_backend() != 'cpu', reason='on an accelerator the train step donates its state')
def test_on_a_cpu_the_train_step_donates_nothing_which_would_copy_every_leaf_of_the_state(tiny_data_dir, tmp_path):
  """XLA:CPU copies a donated state's every leaf when the step starts (parameters and both Adam moments), so the
  trainer's step donates nothing there: its compiled program copies no argument and aliases no output."""
  task = train.create_task(tiny_config(tiny_data_dir), str(tmp_path))
  state = flax.jax_utils.replicate(trainer.create_state(task, jax.random.PRNGKey(0)))
  batch = next(device_batches(task.train_batches(0), size=1))
  rng, no_stop = flax.jax_utils.replicate(jax.random.PRNGKey(1)), stop_requests(False)
  sums = trainer.zero_sums(task, state, batch, rng, no_stop)
  donating = jax.pmap(functools.partial(trainer.accumulating_train_step, task=task), axis_name=AXIS, donate_argnums=0)
  compiled = {name: step.lower(state, sums, batch, rng, no_stop).compile()
              for name, step in (('donating', donating), ('trainer', pmapped_steps(task)[0]))}
  def argument_copies(program) -> int:  # Copies of the entry computation's parameters.
    return len(re.findall(r' copy\(%[\w.]*args?[\w.]*\)', program.as_text().split('ENTRY')[-1]))

  assert argument_copies(compiled['donating']) >= len(jax.tree.leaves(state)) - 1 > 0  # All but the step counter.
  assert argument_copies(compiled['trainer']) == 0
  assert compiled['trainer'].memory_analysis().alias_size_in_bytes == 0


@pytest.mark.parametrize('key, value, message', [
    ('b1', 1.0, r"optimizer.b1=1.0 must be >= 0 and < 1 \(Adam's moment decay\)"),
    ('b2', -0.5, r'optimizer.b2=-0.5 must be >= 0 and < 1'),
    ('warmup_steps', -1, r'optimizer.warmup_steps=-1 must be >= 0'),
    ('learning_rate', 0.0, r'optimizer.learning_rate=0.0 must be > 0'),
])
def test_optimizer_values_out_of_range_fail_before_training(tiny_data_dir, key, value, message):
  config = tiny_config(tiny_data_dir)
  config.optimizer[key] = value
  with pytest.raises(ValueError, match=message):
    train.create_task(config, '/nonexistent/never/written')


@pytest.mark.slow
def test_a_resumed_run_matches_an_uninterrupted_one_and_a_finished_one_keeps_its_record(tiny_data_dir, tmp_path):
  config = tiny_config(tiny_data_dir, num_train_steps=20)  # Logs every 5 steps; evaluates, checkpoints every 10.
  config.model.update(dropout_rate=0.1, attention_dropout_rate=0.1)  # Resume must restore the dropout keys too,
  config.data.augment.shuffle_arguments = 0.5  # and the augmentation's draws.
  straight = run_listops(config, tmp_path / 'straight')
  assert run_listops(config, tmp_path / 'resumed', should_stop=lambda step: step == 17) == {
      'status': 'stopped', 'step': 17, 'training_ended': {'reason': 'stop_request', 'step': 17}}
  with Checkpoints(str(tmp_path / 'resumed'), max_to_keep=2) as checkpoints:
    assert checkpoints.latest_step() == 17  # The stop saved (test_reliability's SIGTERM test resumes from such).
  shutil.rmtree(tmp_path / 'resumed' / 'checkpoints' / '17')  # As if killed at 17: step 15 logged, 10 saved.
  resumed = run_listops(config, tmp_path / 'resumed')
  assert resumed['steps_this_run'] == 10
  chex.assert_trees_all_equal(final_params(tmp_path / 'straight', 20), final_params(tmp_path / 'resumed', 20))
  assert resumed['test'] == straight['test'] and resumed['best_step'] == straight['best_step']

  timing = ('steps_per_second', 'examples_per_second', 'excluded_seconds', 'eta_minutes')

  def history(workdir):
    with open(workdir / 'metrics.jsonl') as f:
      return [{k: v for k, v in json.loads(line).items() if k not in timing} for line in f]

  assert history(tmp_path / 'resumed') == history(tmp_path / 'straight')  # No replayed or repeated records.
  assert [(run['first_step'], run['last_step']) for run in resumed['runs']] == [(0, 10), (10, 20)]
  assert resumed['train_seconds_total'] == pytest.approx(sum(run['train_seconds'] for run in resumed['runs']))
  assert resumed['train_seconds_this_run'] == resumed['runs'][-1]['train_seconds'] > 0

  files = {name: (tmp_path / 'resumed' / name).read_text() for name in ('results.json', 'metrics.jsonl')}
  again = run_listops(config, tmp_path / 'resumed')  # Already finished: the record stays as it was.
  assert again == json.loads(files['results.json'])
  assert {name: (tmp_path / 'resumed' / name).read_text() for name in files} == files
  (tmp_path / 'resumed' / 'results.json').unlink()  # As if killed while testing: it tests, and compiles nothing.
  tested = run_listops(config, tmp_path / 'resumed')
  assert tested['test'] == resumed['test'] and tested['runs'][-1] == {
      'first_step': 20, 'last_step': 20, 'train_seconds': tested['runs'][-1]['train_seconds'], 'compile_seconds': 0.0}


def validation_history(workdir) -> list[tuple[int, float]]:
  return [(record['step'], record['accuracy']) for record in read_history(str(workdir), 'validation')]


@pytest.mark.slow
def test_patience_stops_after_that_many_evaluations_without_improvement_and_resumes_alike(tiny_data_dir, tmp_path):
  # A learning rate of 1e-12 leaves every prediction as it was: each evaluation after the first is no better.
  config = tiny_config(tiny_data_dir, num_train_steps=40, patience=3)
  config.optimizer.learning_rate = 1e-12
  config.evaluation.every_steps = 2
  stopped = run_listops(config, tmp_path, should_stop=lambda step: step == 5)
  assert stopped == {'status': 'stopped', 'step': 5, 'training_ended': {'reason': 'stop_request', 'step': 5}}
  results = run_listops(config, tmp_path)  # Resumed at 5: the count of stale evaluations is in the record.
  assert results['training_ended'] == {'reason': 'patience', 'step': 8} and results['step'] == 8
  assert results['best_step'] == 2 and [step for step, _ in validation_history(tmp_path)] == [2, 4, 6, 8]
  assert run_listops(config, tmp_path) == json.loads((tmp_path / 'results.json').read_text())  # Finished: kept.
  config.training.patience = 5  # More patience continues the run from where it stopped.
  assert run_listops(config, tmp_path)['training_ended'] == {'reason': 'patience', 'step': 12}


@pytest.mark.slow
def test_patience_stops_where_a_full_run_stops_improving_and_averaging_is_the_mean_of_the_evaluated(
    tiny_data_dir, tmp_path):
  config = tiny_config(tiny_data_dir, num_train_steps=40)
  config.evaluation.every_steps = config.checkpoint.every_steps = 2
  config.checkpoint.max_to_keep = 20
  run_listops(config, tmp_path / 'full')
  history = validation_history(tmp_path / 'full')
  best, stale, expected_stop = -1.0, 0, None  # Where patience 2 must end, read from the full run's history.
  for step, accuracy in history:
    best, stale = (accuracy, 0) if accuracy > best else (best, stale + 1)
    if stale == 2:
      expected_stop = step
      break
  assert expected_stop is not None and expected_stop < 40, history  # Else this run tests nothing.

  config.training.patience, config.evaluation.average_last = 2, 3
  results = run_listops(config, tmp_path / 'patient')
  assert results['training_ended'] == {'reason': 'patience', 'step': expected_stop}
  assert validation_history(tmp_path / 'patient') == [entry for entry in history if entry[0] <= expected_stop]
  steps = [expected_stop - 4, expected_stop - 2, expected_stop]
  assert results['averaged']['steps'] == steps
  # The averaged parameters, computed here from the run's own checkpoints, score as reported.
  params = [final_params(tmp_path / 'patient', step) for step in steps]
  evaluated_steps, evaluated = restore_evaluated(str(tmp_path / 'patient'))  # The kept ones, read back read-only.
  assert evaluated_steps == steps
  chex.assert_trees_all_equal(evaluated, params)
  mean = jax.tree.map(lambda *leaves: np.mean(np.stack(leaves), axis=0), *params)
  task = train.create_task(config, str(tmp_path / 'patient'))
  _, p_eval_step = pmapped_steps(task)
  for split, reported in (('validation', results['averaged']['validation']), ('test', results['averaged']['test'])):
    scored = evaluate(p_eval_step, flax.jax_utils.replicate(mean), task.eval_batches(split))
    assert scored == pytest.approx(reported, rel=1e-6), split
  assert results['averaged']['test'] != results['test']  # Not the best checkpoint's scores under another name.


def test_reading_a_fresh_workdirs_checkpoints_shows_no_read_only_notice_and_other_warnings_stay(tmp_path, caplog):
  caplog.set_level(logging.WARNING)
  checkpointing._manager(str(tmp_path / 'checkpoints'), max_to_keep=None, read_only=True).close()
  assert not [r for r in caplog.records if 'read only' in r.getMessage() or 'read_only' in r.getMessage()]
  ocp.CheckpointManagerOptions(read_only=True)  # Outside the reader: Orbax's notice reaches the log.
  assert [r for r in caplog.records if 'read_only=True, setting save_interval_steps=0' in r.getMessage()]
