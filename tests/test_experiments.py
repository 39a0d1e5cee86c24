"""The comparison study's tools: sweeps, length generalisation, diagnostics, replication options."""
import csv
import dataclasses
import json
import os
import random
import re
import shutil
import subprocess

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from configs.listops import lra
from lra_posenc import encodings, plots, run_folders
from lra_posenc.config_files import load_config
from lra_posenc.data import listops
from lra_posenc.encodings.legendre import legendre_table
from lra_posenc.encodings.sinusoidal import sinusoidal_table
from lra_posenc.listops import settings as listops_settings
from lra_posenc.lm import settings as lm_settings
from lra_posenc.models.attention import attend, attention_weights
from lra_posenc.models.classifier import PLACEMENTS
from lra_posenc.studies import diagnostics, length_generalisation, sweep
from lra_posenc.tasks import CONFIG_HISTORIES, TASKS
from lra_posenc.training.checkpointing import read_config
from lra_posenc.training.run_files import CONFIG_FILE, MetricWriter, read_history, read_json, write_json
from lra_posenc.training.settings import task_of, upgrade_old_config
from lra_posenc.translation import bleu
from lra_posenc.translation import settings as translation_settings
from lra_posenc.translation.translator import create_translator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A one-layer model on expressions of 11-23 tokens; each run takes seconds.
TINY_SWEEP = [
    'data.max_length=24', 'data.generator.shorter_than=24', 'data.generator.max_depth=4', 'data.generator.max_args=4',
    'data.generator.num_train_samples=256', 'data.generator.num_valid_samples=32',
    'data.generator.num_test_samples=32', 'model.emb_dim=16', 'model.qkv_dim=16', 'model.mlp_dim=32',
    'model.classifier_dim=16', 'model.num_layers=1', 'training.num_train_steps=12', 'training.log_every_steps=4',
    'evaluation.every_steps=4', 'evaluation.batch_size=16', 'checkpoint.every_steps=4', 'optimizer.warmup_steps=2']


@pytest.fixture(scope='module')
def tiny_sweep(tmp_path_factory):
  """A finished sweep of two encodings (one that cannot extrapolate) by two seeds, two runs at a time; its
  directory and output."""
  output_dir = str(tmp_path_factory.mktemp('sweep'))
  arguments = ['--task=listops', '--config=configs/listops/lra.py:sweep', '--variants=none,learned', '--seeds=0,1',
               f'--output_dir={output_dir}', '--target=0.0', '--jobs=2']
  # Both override syntaxes: training's --config.KEY=VALUE and the sweep's --set KEY=VALUE.
  arguments += [f'--config.{s}' if i % 2 else f'--set={s}' for i, s in enumerate(TINY_SWEEP)]
  sweep.main(arguments)
  return output_dir, arguments


def test_variants_name_encoding_options_or_any_config_key():
  variant = run_folders.parse_variant('legendre:grid=open:model.pos_encoding_placement=after_encoder')
  assert variant.encoding == 'legendre'
  assert variant.overrides == (('model.pos_encoding', 'legendre'), ('model.pos_encoding_options.legendre.grid', 'open'),
                               ('model.pos_encoding_placement', 'after_encoder'))
  assert run_folders.spec_of_directory(variant.directory) == variant.spec
  for spec in ('rope:base=-1', 'rope:base=1=2:model.dtype=bfloat16', 't5:max_distance=128:num_buckets=32'):
    # A run folder names its variant.
    assert run_folders.spec_of_directory(run_folders.parse_variant(spec).directory) == spec
  for spec, error in (('rope:model.dtype=a/b', "'/' and '__'"), ('rope:max__x=1', "'/' and '__'"),
                      ('rope:base-x=1', "key 'base-x' has a '-'")):
    with pytest.raises(ValueError, match=error):
      run_folders.parse_variant(spec)
  with pytest.raises(ValueError, match=r"'sine' is not one of \['none'"):
    run_folders.parse_variant('sine')
  with pytest.raises(ValueError, match="'grid' is not KEY=VALUE"):
    run_folders.parse_variant('legendre:grid')


@pytest.mark.parametrize('num_variants', [3, 10, 12, 20])
def test_comparison_plots_give_every_variant_its_own_colour(num_variants):
  figure, axes = plots.comparison_figure(num_variants)
  lines = [axes.plot([0, 1], [i, i])[0] for i in range(num_variants)]
  assert len({line.get_color() for line in lines}) == num_variants
  plots.plt.close(figure)


def test_steps_to_target_is_the_first_crossing():
  history = [{'step': 10, 'accuracy': 0.2}, {'step': 20, 'accuracy': 0.5}, {'step': 30, 'accuracy': 0.4}]
  assert sweep.steps_to_target(history, 'accuracy', 0.45) == 20
  assert sweep.steps_to_target(history, 'accuracy', 0.6) is None


def test_summary_is_mean_and_sample_std_over_seeds():
  rows = [{'variant': 'a', 'seed': s, 'test accuracy': v, 'steps to x': t}
          for s, v, t in ((0, 0.5, 10), (1, 0.7, None), (2, 0.6, 30))]
  (summary,) = sweep.variant_summaries(rows, [run_folders.Variant('a', 'none', ())])
  accuracy = summary['columns']['test accuracy']
  assert accuracy['mean'] == pytest.approx(0.6) and accuracy['std'] == pytest.approx(0.1)
  assert summary['columns']['steps to x']['count'] == 2
  table = sweep.summary_table([summary], digits={'steps': 0, 'accuracy': 3})
  assert '| a | 3 | 0.600 ± 0.100 | 20 ± 14 (2/3 reached) |' in table


def test_runs_whose_best_checkpoint_is_their_last_step_are_named_under_the_table():
  """Best at the step training ended (budget reached while improving) is flagged; a run stopped by patience
  after its best, and an older run that does not say where it ended, are not."""
  rows = [{'variant': 'a', 'seed': 0, 'best step': 3000, 'last step': 3000},
          {'variant': 'a', 'seed': 1, 'best step': 4500, 'last step': 6500},
          {'variant': 'b', 'seed': 0, 'best step': 3000, 'last step': None},
          {'variant': 'b', 'seed': 2, 'best step': 2750, 'last step': 2750}]
  variants = [run_folders.Variant(name, name, ()) for name in ('a', 'b')]
  summaries = sweep.variant_summaries(rows, variants)
  assert [s['seeds best at last step'] for s in summaries] == [[0], [2]]
  assert sweep.budget_note(summaries) == (
      '\nBest checkpoint at the last step, validation still rising when training ended (2 of 4 runs; scores of '
      'this budget, not of a plateau): a seed 0, b seed 2.\n')
  assert sweep.budget_note(sweep.variant_summaries(rows[1:3], variants)) == ''
  table = sweep.summary_table(summaries, digits={'step': 0})
  assert '| a | 2 | 3750 ± 1061 | 4750 ± 2475 |' in table and '| b | 2 | 2875 ± 177 | 2750 (1/2 runs) |' in table


def test_runs_on_different_devices_are_named_under_the_table(tmp_path):
  """Train minutes of a GPU run beside CPU runs mean nothing unless the table says which ran where; the
  device is a label, not a figure averaged over seeds. Runs on one kind of device get no note."""
  cpu = {'platform': 'cpu', 'kind': 'cpu', 'count': 1}
  zen3 = {'model': 'AMD EPYC', 'family': 25, 'model_number': 1, 'vector_extensions': ['avx2', 'fma'], 'cores': 2}
  provenances = {0: {'devices': cpu, 'host_cpu': zen3},
                 1: {'devices': cpu, 'host_cpu': {'model': 'AMD EPYC', 'cores': 2}}, 2: {'devices': cpu},
                 3: {'devices': {'platform': 'gpu', 'kind': 'NVIDIA H100 80GB HBM3', 'count': 2}}, 4: None}
  variant = run_folders.Variant('rope', 'rope', ())
  rows = []
  for seed, provenance in provenances.items():
    os.makedirs(tmp_path / str(seed))
    with open(tmp_path / str(seed) / 'results.json', 'w') as f:
      json.dump({'test_sets': {'test': {'bleu': 20.0 + seed}}, 'validation': {'accuracy': 0.4}, 'best_step': 10,
                 **({'provenance': provenance} if provenance else {})}, f)
    rows.append(sweep.run_row(TASKS['translation'], variant, seed, str(tmp_path / str(seed)), target=0.43))
  assert [row['device'] for row in rows] == ['CPU (AMD EPYC (family 25, model 1; avx2, fma), 2 cores)',
                                             'CPU (AMD EPYC, 2 cores)', 'CPU (model not recorded)',
                                             '2 x NVIDIA H100 80GB HBM3', None]
  (summary,) = sweep.variant_summaries(rows, [variant])
  assert 'device' not in summary['columns'] and summary['devices'] == [row['device'] for row in rows]
  assert sweep.device_note([summary]) == (
      '\nTrained on more than one kind of device (train minutes compare within one only): CPU (AMD EPYC (family 25, '
      'model 1; avx2, fma), 2 cores): rope seed 0; CPU (AMD EPYC, 2 cores): rope seed 1; CPU (model not recorded): '
      'rope seed 2; 2 x NVIDIA H100 80GB HBM3: rope seed 3; not recorded: rope seed 4.\n')
  assert sweep.device_note(sweep.variant_summaries(rows[:1], [variant])) == ''


def test_translation_rows_carry_both_bleus_and_older_runs_leave_the_new_one_empty(tmp_path):
  task = TASKS['translation']
  for name, scores in (('new', {'bleu': 21.5, 'tokenized_bleu': 33.25, 'accuracy': 0.5}),
                       ('old', {'bleu': 20.0, 'accuracy': 0.5})):
    os.makedirs(tmp_path / name)
    with open(tmp_path / name / 'results.json', 'w') as f:
      json.dump({'test_sets': {'test_2016_flickr': scores}, 'validation': {'accuracy': 0.4}, 'best_step': 10}, f)
  variant = run_folders.Variant('rope', 'rope', ())
  new = sweep.run_row(task, variant, 0, str(tmp_path / 'new'), target=0.43)
  old = sweep.run_row(task, variant, 1, str(tmp_path / 'old'), target=0.43)
  assert (new['test_2016_flickr bleu'], new['test_2016_flickr tokenized_bleu']) == (21.5, 33.25)
  assert (old['test_2016_flickr bleu'], old['test_2016_flickr tokenized_bleu']) == (20.0, None)
  table = sweep.summary_table(sweep.variant_summaries([new, old], [variant]),
                                   digits={'steps': 0, 'validation': 3, 'bleu': 2})
  assert '| rope | 2 | 20.75 ± 1.06 | 33.25 (1/2 runs) | 0.400 ± 0.000 |' in table


def test_the_length_cache_keeps_buckets_in_the_order_scored_and_rescores_a_run_trained_on(tmp_path):
  """The cache's bucket order is the table's column order, so a rewrite (a second key) must not sort it; a run
  trained on since (its best step moved) has other checkpoints, so its kept scores are stale."""
  results = {'best_step': 100, 'step': 300}
  (tmp_path / 'results.json').write_text(json.dumps(results))
  buckets = {'test (<= 64)': 0.5, '64-127': 0.4, '128-255': 0.3}
  length_generalisation.cached(str(tmp_path), 'length', lambda: dict(buckets))
  assert list(length_generalisation.cached(str(tmp_path), 'depth', lambda: {'1': 0.9})) == ['1']
  assert list(length_generalisation.length_scores(str(tmp_path))) == ['length', 'depth']
  assert list(length_generalisation.cached(str(tmp_path), 'length', lambda: {})) == list(buckets)
  (tmp_path / 'results.json').write_text(json.dumps(results | {'best_step': 500, 'step': 600}))
  assert length_generalisation.length_scores(str(tmp_path)) == {}
  assert length_generalisation.cached(str(tmp_path), 'length', lambda: {'64-127': 0.6}) == {'64-127': 0.6}
  assert list(length_generalisation.length_scores(str(tmp_path))) == ['length']


def test_paired_changes_pair_each_run_with_the_same_encoding_and_seed_and_nothing_else():
  def row(variant, seed, bucket, score):
    return {'variant': variant, 'workdir': f'runs/{variant}/seed_{seed}/', 'bucket': bucket, 'score': score}
  shifts = {0: 0.05, 1: -0.02, 2: 0.10, 3: 0.0}
  earlier = [row('rope', seed, bucket, 0.4 + i / 10) for seed in (0, 1, 2) for i, bucket in enumerate(('a', 'b'))]
  earlier += [row('learned', 0, 'b', None), row('alibi', 0, 'a', 0.3)]
  rows = [row('rope', seed, bucket, 0.4 + i / 10 + shifts[seed])
          for seed in (2, 0, 3) for i, bucket in enumerate(('a', 'b'))]  # Seed 3 is not in `earlier`.
  rows += [row('learned', 0, 'b', 0.2), row('none', 0, 'a', 0.3)]
  paired = length_generalisation.paired_changes(rows, earlier)
  assert list(paired) == ['rope'] and list(paired['rope']) == ['a', 'b']
  for cell in paired['rope'].values():
    assert cell['seeds'] == ['seed_2', 'seed_0']
    assert cell['changes'] == pytest.approx([shifts[2], shifts[0]])
    assert cell['now'] == pytest.approx([b + c for b, c in zip(cell['before'], cell['changes'])])
  table = length_generalisation.paired_table(paired, ['a', 'b', 'c'], 'old/runs.csv', digits=3)
  assert '| rope | this report | 0.475 ± 0.035 | 0.575 ± 0.035 |  |' in table
  assert '|  | change, per seed | +0.075 (+0.100, +0.050) |' in table


def test_a_column_only_some_variants_have_is_in_every_row_of_the_table():
  """Runs with and without checkpoint averaging in one table: the averaged column reads n/a where absent."""
  rows = [{'variant': 'a', 'seed': 0, 'bleu': 20.0}, {'variant': 'b', 'seed': 0, 'bleu': 21.0, 'averaged bleu': 22.0}]
  variants = [run_folders.Variant(name, name, ()) for name in ('a', 'b')]
  summaries = sweep.variant_summaries(rows, variants)
  assert [list(s['columns']) for s in summaries] == [['bleu', 'averaged bleu']] * 2
  table = sweep.summary_table(summaries, digits={'bleu': 2})
  assert '| a | 1 | 20.00 | n/a |' in table and '| b | 1 | 21.00 | 22.00 |' in table


def test_a_table_names_the_runs_not_finished(tmp_path):
  """A seed missing from a variant's figures is named, not silently averaged over fewer seeds; a seed stopped
  early leaves the convergence curve to the others."""
  for variant, seed, steps in (('rope', 0, [10, 20, 30]), ('rope', 1, [10, 20]), ('t5', 0, [10])):
    workdir = tmp_path / 'runs' / variant / f'seed_{seed}'
    os.makedirs(workdir)
    (workdir / 'results.json').write_text(json.dumps({'test_sets': {'test': {'accuracy': 0.5}}, 'best_step': steps[-1],
                                                      'validation': {'accuracy': 0.4}, 'step': steps[-1]}))
    (workdir / 'metrics.jsonl').write_text(''.join(
        json.dumps({'prefix': 'validation', 'step': step, 'accuracy': step / 100}) + '\n' for step in steps))
  os.makedirs(tmp_path / 'runs' / 't5' / 'seed_1')  # Still training.
  variants = [run_folders.Variant(name, name, ()) for name in ('rope', 't5')]
  summaries = sweep.tabulate(TASKS['listops'], variants, [0, 1, 2], str(tmp_path / 'runs'), 0.4,
                                  str(tmp_path / 'report'))
  assert [summary['seeds'] for summary in summaries] == [[0, 1], [0]]
  table = (tmp_path / 'report' / 'summary.md').read_text()
  assert 'Not finished (no results.json), so not in the table: rope seed 2; t5 seeds 1, 2.' in table
  assert os.path.getsize(tmp_path / 'report' / 'convergence.png') > 0


def test_translation_rows_carry_the_averaged_checkpoint_beside_the_best(tmp_path):
  best = {'test_2016_flickr': {'bleu': 21.5, 'tokenized_bleu': 33.25}, 'test_2017_flickr': {'bleu': 18.0}}
  averaged = {'test_2016_flickr': {'bleu': 22.5, 'tokenized_bleu': 34.0}, 'test_2017_flickr': {'bleu': 19.0}}
  with open(tmp_path / 'results.json', 'w') as f:
    json.dump({'test_sets': best, 'validation': {'accuracy': 0.4}, 'best_step': 10,
               'averaged': {'steps': [8, 9, 10], 'test_sets': averaged, 'validation': {'accuracy': 0.45}}}, f)
  row = sweep.run_row(TASKS['translation'], run_folders.Variant('rope', 'rope', ()), 0, str(tmp_path), target=0.43)
  assert (row['test_2016_flickr tokenized_bleu'], row['averaged test_2016_flickr tokenized_bleu']) == (33.25, 34.0)
  assert (row['test_2017_flickr bleu'], row['averaged test_2017_flickr bleu']) == (18.0, 19.0)
  assert row['averaged test_2017_flickr tokenized_bleu'] is None
  assert (row['best validation accuracy'], row['averaged validation accuracy']) == (0.4, 0.45)
  assert row['best step'] == 10


@pytest.mark.parametrize('arguments,error', [
    (['--variants=none,legendre:gird=open'], r"variant 'legendre:gird=open': .*legendre.gird is not a config key; "
                                              r"did you mean 'grid'\?"),
    (['--variants=rope,t5:max_distance=8'], r"variant 't5:max_distance=8': .*max_distance"),
    # A shared setting's error names no variant: it is every run's.
    (['--variants=rope', '--set=training.num_train_steps=0'], r"error: training.num_train_steps=0 must be > 0"),
    (['--variants=rope', '--config.model.emb_dim=x'], r"error: flag --config.model.emb_dim=x: invalid literal"),
    (['--variants=rope,none,rope'], r'error: --variants names rope more than once'),
    (['--variants=rope', '--seeds=0,1,0'], r'error: --seeds names 0 more than once'),
    (['--variants=rope', '--config.seed=5'], r'error: seed is set per run by --seeds')])
def test_a_sweep_with_a_bad_config_fails_before_training_any_run(arguments, error, tmp_path, capsys):
  with pytest.raises(SystemExit) as exit_status:
    sweep.main(['--task=listops', '--config=configs/listops/lra.py:sweep', f'--output_dir={tmp_path}', *arguments])
  assert exit_status.value.code == 2
  assert re.search(error, capsys.readouterr().err)
  assert not os.listdir(tmp_path)


@pytest.mark.slow
def test_sweep_trains_each_run_once_and_tabulates(tiny_sweep, capsys, tmp_path_factory):
  output_dir, arguments = tiny_sweep
  for variant in ('none', 'learned'):
    for seed in (0, 1):
      workdir = os.path.join(output_dir, variant, f'seed_{seed}')
      with open(os.path.join(workdir, 'config.json')) as f:
        config = json.load(f)
      assert config['seed'] == seed and config['model']['pos_encoding'] == variant
      assert config['model']['num_layers'] == 1 and config['model']['qkv_dim'] == 16  # --config. and --set.
      assert [r['step'] for r in read_history(workdir, 'validation')] == [4, 8, 12]
  with open(os.path.join(output_dir, 'runs.csv')) as f:
    rows = list(csv.DictReader(f))
  assert [(r['variant'], r['seed']) for r in rows] == [('none', '0'), ('none', '1'), ('learned', '0'), ('learned', '1')]
  with open(os.path.join(output_dir, 'none', 'seed_1', 'results.json')) as f:
    assert float(rows[1]['test accuracy']) == json.load(f)['test']['accuracy']
  assert {r['steps to validation accuracy 0'] for r in rows} == {'4'}  # Target 0: reached at the first validation.
  assert {r['last step'] for r in rows} == {'12'}  # Every run trained its whole budget.
  with open(os.path.join(output_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert [[int(r['seed']) for r in rows if r['variant'] == s['variant'] and r['best step'] == '12'] for s in summary] == [
      s['seeds best at last step'] for s in summary]
  values = [float(r['test accuracy']) for r in rows[:2]]
  assert summary[0]['columns']['test accuracy']['mean'] == pytest.approx(np.mean(values))
  assert os.path.getsize(os.path.join(output_dir, 'convergence.png')) > 0
  # A run trained beside another (--jobs=2) is the run trained alone.
  alone = str(tmp_path_factory.mktemp('alone'))
  settings = [sweep.parse_setting(s) for s in TINY_SWEEP] + [('model.pos_encoding', 'learned')]
  subprocess.run(sweep.training_command(TASKS['listops'], 'configs/listops/lra.py:sweep', alone, 1, settings),
                 cwd=ROOT, check=True, capture_output=True)
  assert read_history(alone, 'validation') == read_history(os.path.join(output_dir, 'learned', 'seed_1'), 'validation')
  # Re-running trains nothing: every run is finished, so only the table is rebuilt.
  before = os.path.getmtime(os.path.join(output_dir, 'none', 'seed_0', 'results.json'))
  capsys.readouterr()
  sweep.main(arguments)
  assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith('training ')]
  assert os.path.getmtime(os.path.join(output_dir, 'none', 'seed_0', 'results.json')) == before
  # Asking the finished runs for other settings is an error: a table would average the two.
  with pytest.raises(SystemExit) as exit_status:
    sweep.main(arguments + ['--set=training.num_train_steps=16'])
  assert exit_status.value.code == 2
  assert re.search(r'none/seed_0: training.num_train_steps=12 \(now 16\)', capsys.readouterr().err)


def test_a_run_folder_not_named_seed_s_is_an_error_not_one_more_seed(tmp_path):
  for folder in ('seed_0', 'seed_0_old'):
    os.makedirs(tmp_path / 'rope' / folder)
    write_json(str(tmp_path / 'rope' / folder / 'results.json'), {})
  with pytest.raises(ValueError, match=r'rope/seed_0_old: a run folder is named seed_S'):
    length_generalisation.finished_runs(str(tmp_path))


@pytest.mark.slow
def test_length_generalisation_scores_buckets_and_marks_non_extrapolating(tiny_sweep):
  output_dir, _ = tiny_sweep
  length_generalisation.main(['--task=listops', f'--sweep_dir={output_dir}', '--bounds=24,32,48',
                              '--num_samples=20'])
  with open(os.path.join(output_dir, 'length_generalisation', 'summary.json')) as f:
    summary = json.load(f)
  assert summary['buckets'] == ['test (<= 24)', '24-31', '32-47']
  none, learned = summary['variants']['none'], summary['variants']['learned']
  assert all(len(cell['values']) == 2 and cell['mean'] is not None for cell in none.values())
  assert learned['test (<= 24)']['mean'] is not None
  assert learned['24-31']['values'] == [None, None] and learned['32-47']['mean'] is None
  test_scores = [json.load(open(os.path.join(output_dir, 'none', f'seed_{s}', 'results.json')))['test']['accuracy']
                 for s in (0, 1)]
  assert none['test (<= 24)']['values'] == pytest.approx(test_scores)
  data_dir = os.path.join(output_dir, 'length_generalisation', 'data')
  for path in os.listdir(data_dir):
    low, high = map(int, path.split('_')[1].split('-'))
    with open(os.path.join(data_dir, path)) as f:
      rows = f.read().splitlines()[1:]
    assert len(rows) == 20 and all(low <= len(listops_tokens(r)) <= high for r in rows)
  with open(os.path.join(output_dir, 'length_generalisation', 'summary.md')) as f:
    assert '| learned | 0.' in f.read().replace('cannot extrapolate', 'X')
  # A re-run reads these instead of scoring again.
  scored = length_generalisation.length_scores(os.path.join(output_dir, 'none', 'seed_0'))
  assert list(scored) == ['listops [24, 32, 48] 20']
  # Paired with its own runs (read back from runs.csv), every seed's change is zero.
  own_runs = os.path.join(output_dir, 'length_generalisation', 'runs.csv')
  length_generalisation.main(['--task=listops', f'--sweep_dir={output_dir}', '--bounds=24,32,48',
                              '--num_samples=20', f'--paired_with={own_runs}'])
  with open(os.path.join(output_dir, 'length_generalisation', 'paired.json')) as f:
    paired = json.load(f)['variants']
  assert paired['none']['24-31']['seeds'] == ['seed_0', 'seed_1'] and '24-31' not in paired['learned']
  assert {change for cells in paired.values() for cell in cells.values() for change in cell['changes']} == {0.0}

  length_generalisation.main(['--task=listops', f'--sweep_dir={output_dir}', '--by=depth'])
  with open(os.path.join(output_dir, 'depth', 'summary.json')) as f:
    by_depth = json.load(f)
  assert set(by_depth['buckets']) <= {'1', '2', '3'}  # Generator depth 4: lists nest at most 3 deep.
  for variant in ('none', 'learned'):  # Per seed, depths weighted by their examples give the test accuracy.
    cells = by_depth['variants'][variant]
    examples = [cells[d]['examples'] for d in by_depth['buckets']]
    assert sum(examples) == 32
    for seed in (0, 1):
      with open(os.path.join(output_dir, variant, f'seed_{seed}', 'results.json')) as f:
        accuracy = json.load(f)['test']['accuracy']
      weighted = sum(cells[d]['values'][seed] * n for d, n in zip(by_depth['buckets'], examples)) / 32
      assert weighted == pytest.approx(accuracy, abs=1e-6)
  assert os.path.getsize(os.path.join(output_dir, 'depth', 'accuracy_by_depth.png')) > 0


def test_recorded_sentence_statistics_give_each_length_bucket_the_bleu_of_its_sentences(tmp_path, capsys):
  """A committed run keeps its sentence statistics, not its translations: the BLEU of a bucket of source
  lengths, summed from them, is the corpus BLEU of that bucket's translations scored anew."""
  config = load_config(os.path.join(ROOT, 'configs', 'translation', 'multi30k.py'), 'tiny')
  config.data.test_splits = ('test_a', 'test_b')
  config.data.data_dir = '/another/machine/multi30k'  # Where it trained; --data_dir says where the text is here.
  data = translation_settings.read_data(config.data)
  rng = random.Random(0)
  words = 'ein hund läuft über die grüne wiese im park und eine katze schläft dort'.split()
  sentences = lambda n, low, high: [' '.join(rng.choices(words, k=rng.randint(low, high))) for _ in range(n)]
  text_dir, sweep_dir = tmp_path / 'text', tmp_path / 'sweep'
  os.makedirs(text_dir)
  splits = {}
  for split in config.data.test_splits:
    sources, references = sentences(40, 3, 30), sentences(40, 3, 20)
    hypotheses = [reference if i % 3 else ' '.join(reference.split()[::-1]) for i, reference in enumerate(references)]
    (text_dir / f'{split}.en').write_text('\n'.join(sources) + '\n')
    (text_dir / f'{split}.de').write_text('\n'.join(references) + '\n')
    splits[split] = sources, hypotheses, references
  for seed in (0, 1):  # Seed 1 recorded no sentence statistics: it is skipped.
    run_dir = sweep_dir / 'rope' / f'seed_{seed}'
    os.makedirs(run_dir)
    (run_dir / 'config.json').write_text(json.dumps(config.to_dict()))
    (run_dir / 'results.json').write_text(json.dumps({'best_step': 100, 'step': 100}))
    for split, (_, hypotheses, references) in splits.items():
      if seed == 0:
        bleu.record_statistics(str(run_dir), 'averaged', split, hypotheses, references, data)
  length_generalisation.main(['--task=translation', f'--sweep_dir={sweep_dir}', '--bounds=1,10,20',
                              '--recorded=averaged:tokenized_bleu', f'--data_dir={text_dir}'])
  with open(sweep_dir / 'length_generalisation' / 'summary.json') as f:
    summary = json.load(f)
  protocol = bleu.protocols(data)['tokenized_bleu']
  pooled = [sentence for split in splits.values() for sentence in zip(*split)]
  for bucket, (low, high) in {'1-9': (1, 10), '10-19': (10, 20), '20+': (20, 10**6)}.items():
    chosen = [(hypothesis, reference) for source, hypothesis, reference in pooled
              if low <= len(source.split()) < high]
    cell = summary['variants']['rope'][bucket]
    assert cell['values'] == [pytest.approx(protocol.score(*map(list, zip(*chosen))), abs=1e-9)]
    assert cell['examples'] == len(chosen)
  capsys.readouterr()
  with pytest.raises(SystemExit):
    length_generalisation.main(['--task=listops', f'--sweep_dir={sweep_dir}', '--bounds=1,10',
                                '--recorded=averaged:tokenized_bleu', f'--data_dir={text_dir}'])
  assert '--recorded: --task=listops records no sentence statistics' in capsys.readouterr().err
  with pytest.raises(SystemExit):
    length_generalisation.main(['--task=translation', f'--sweep_dir={sweep_dir}', '--bounds=1,10',
                                f'--data_dir={text_dir}'])
  assert '--data_dir: only --recorded reads test text from it' in capsys.readouterr().err
  with pytest.raises(SystemExit):
    length_generalisation.main(['--task=translation', f'--sweep_dir={sweep_dir}', '--bounds=1,10',
                                '--recorded=last:tokenized_bleu', f'--data_dir={text_dir}'])
  assert ("--recorded=last:tokenized_bleu: want CHECKPOINT:BLEU, CHECKPOINT one of ['best', 'averaged'], BLEU one "
          "of ['bleu', 'tokenized_bleu']") in capsys.readouterr().err


def test_runs_scored_on_different_examples_give_no_majority_baseline(tmp_path):
  """The majority-class row is one baseline for every run: runs whose kept scores disagree on it were scored on
  different examples, and the table would be wrong for some of them."""
  key = length_generalisation.length_set_key('listops', 'length', [24, 32], 20)
  for seed, majority in enumerate((0.2, 0.3)):
    run_dir = tmp_path / 'none' / f'seed_{seed}'
    os.makedirs(run_dir)
    (run_dir / 'results.json').write_text(json.dumps({'best_step': 100, 'step': 100}))
    (run_dir / length_generalisation.CACHE_FILE).write_text(json.dumps(
        {key: {'24-31': {'score': 0.5, 'majority': majority, 'examples': 20}}}))
  with pytest.raises(ValueError, match=r"seed_1: bucket 24-31's majority class is 0.3, the other runs' 0.2"):
    length_generalisation.main(['--task=listops', f'--sweep_dir={tmp_path}', '--bounds=24,32', '--num_samples=20'])


def listops_tokens(row: str) -> list[str]:
  return [t for t in row.split('\t')[0].split() if t not in '()']


def test_generator_label_modulus_writes_parity_labels(tmp_path):
  options = listops.GeneratorOptions(max_depth=3, max_args=4, longer_than=4, shorter_than=30, label_modulus=2)
  tens = listops.generate(50, listops.GeneratorOptions(max_depth=3, max_args=4, longer_than=4, shorter_than=30),
                          random.Random(3))
  parity = listops.generate(50, options, random.Random(3))
  assert list(parity) == list(tens) and all(parity[e] == tens[e] % 2 for e in tens)
  with pytest.raises(ValueError, match='label_modulus=1 must be >= 2 and <= 10'):
    listops.GeneratorOptions(label_modulus=1)
  with pytest.raises(ValueError, match='max_args=1 must be >= 2'):
    listops.GeneratorOptions(max_args=1)


def test_generator_refuses_a_length_window_no_tree_reaches():
  shallow = listops.GeneratorOptions(max_depth=3, max_args=4, longer_than=0, shorter_than=100)
  assert shallow.longest_tree() == 26  # [OP [OP 4 values ] x4 ]: 2 + 4 * (2 + 4).
  with pytest.raises(ValueError, match='max_depth=3 and max_args=4 the longest has 26 tokens'):
    listops.GeneratorOptions(max_depth=3, max_args=4, longer_than=26, shorter_than=40)
  listops.GeneratorOptions(max_depth=3, max_args=4, longer_than=25, shorter_than=40)


def test_generator_gives_up_on_a_window_between_the_lengths_its_trees_reach(monkeypatch):
  """Depth 3 with two arguments reaches 1, 4, 7 and 10 tokens: a window of 8 and 9 is an error, not a hang."""
  monkeypatch.setattr(listops, 'MAX_DRAWS_OUTSIDE_THE_WINDOW', 2000)
  gap = listops.GeneratorOptions(max_depth=3, max_args=2, longer_than=7, shorter_than=10)
  with pytest.raises(ValueError, match=r'2000 draws in a row fell outside 7 < length < 10, 1 expressions short'):
    listops.generate(1, gap, random.Random(0))
  assert len(listops.generate(3, dataclasses.replace(gap, longer_than=6), random.Random(0))) == 3  # 7 and 10.


def test_generator_refuses_more_expressions_than_its_options_allow():
  """Depth 1 allows only the ten single values: ten are drawn, an eleventh is an error, not an endless loop."""
  values_only = listops.GeneratorOptions(max_depth=1, longer_than=0, shorter_than=2)
  assert sorted(listops.generate(10, values_only, random.Random(0))) == [str(v) for v in range(10)]
  with pytest.raises(ValueError, match='allow too few distinct expressions.*1 short of the request'):
    listops.generate(11, values_only, random.Random(0))
  with pytest.raises(ValueError, match='repeated one of the 10 already drawn, 2 short'):
    listops.generate(4, values_only, random.Random(0), exclude=frozenset(map(str, range(8))))


@pytest.mark.parametrize('encoding', ['chebyshev', 'sinusoidal'])
def test_after_encoder_placement_leaves_cls_blind_to_order(encoding):
  """Added after the encoder, a table reaches the [CLS] output only as its constant row 0."""
  config = lra.get_config('cpu')
  config.model.update(pos_encoding=encoding, emb_dim=16, qkv_dim=16, mlp_dim=32, classifier_dim=16, num_layers=1)
  tokens = jnp.asarray([[3, 5, 7, 9, 11, 2, 0, 0]])
  permuted = tokens[:, jnp.asarray([4, 2, 0, 3, 1, 5, 6, 7])]
  outputs = {}
  for placement in PLACEMENTS:
    config.model.pos_encoding_placement = placement
    model = listops_settings.create_model(config)
    params = model.init(jax.random.PRNGKey(0), tokens, train=False)['params']
    outputs[placement] = [model.apply({'params': params}, t, train=False) for t in (tokens, permuted)]
  np.testing.assert_allclose(*outputs['after_encoder'], atol=1e-5)
  assert np.abs(outputs['input'][0] - outputs['input'][1]).max() > 1e-3


def test_after_encoder_placement_needs_an_additive_encoding():
  config = lra.get_config('cpu')
  config.model.update(pos_encoding='rope', pos_encoding_placement='after_encoder')
  with pytest.raises(ValueError, match=r"model.pos_encoding_placement='after_encoder' needs an additive encoding "
                                       r"\(\['none', 'chebyshev', 'learned', 'legendre', 'sinusoidal'\]\)"):
    listops_settings.create_model(config)
  config.model.pos_encoding_placement = 'output'
  with pytest.raises(ValueError, match='model.pos_encoding_placement'):
    listops_settings.create_model(config)


def test_metric_history_keeps_the_last_record_per_step_and_survives_a_cut_line(tmp_path):
  writer = MetricWriter(str(tmp_path))
  writer.write(10, {'accuracy': 0.1}, prefix='validation')
  writer.write(10, {'loss': 2.0}, prefix='train')
  writer.close()
  with open(tmp_path / 'metrics.jsonl', 'a') as f:
    f.write('{"step": 20, "prefix": "valid')  # A run killed mid-write.
  writer = MetricWriter(str(tmp_path), resume_step=10)  # The run resumed from its checkpoint at step 10.
  writer.write(10, {'accuracy': 0.3}, prefix='validation')
  writer.write(20, {'accuracy': 0.4}, prefix='validation')
  writer.close()
  assert read_history(str(tmp_path), 'validation') == [
      {'step': 10, 'prefix': 'validation', 'accuracy': 0.3}, {'step': 20, 'prefix': 'validation', 'accuracy': 0.4}]
  with open(tmp_path / 'metrics.jsonl') as f:
    assert len(f.read().splitlines()) == 4  # The cut record is gone; every line parses.


def test_a_resumed_history_drops_the_steps_it_replays_and_the_final_records(tmp_path):
  writer = MetricWriter(str(tmp_path))
  for step in (5, 10, 15, 20):
    writer.write(step, {'loss': 1.0 / step}, prefix='train')
  writer.write(20, {'test_accuracy': 0.5}, prefix='final')
  writer.close()
  MetricWriter(str(tmp_path), resume_step=10).close()
  assert [(r['step'], r['prefix']) for r in map(json.loads, open(tmp_path / 'metrics.jsonl'))] == [
      (5, 'train'), (10, 'train')]


def test_sowed_attention_weights_are_the_ones_attention_uses():
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  query, key, value = (jax.random.normal(k, (2, 5, 3, 4)) for k in keys[:3])
  bias = jax.random.normal(keys[3], (1, 3, 5, 5))
  key_valid = jnp.arange(5)[None, :] < jnp.asarray([5, 3])[:, None]
  weights = attention_weights(query, key, bias=bias, mask=key_valid[:, None, None, :])
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
  assert float(weights[1, :, :, 3:].max()) == 0.0
  output = attend(query, key, value, bias=bias, key_valid=key_valid)
  np.testing.assert_allclose(jnp.einsum('bhqk,bkhd->bqhd', weights, value), output, atol=1e-5)
  np.testing.assert_allclose(jax.nn.dot_product_attention(query, key, value, bias=bias,  # An independent path.
                                                          mask=key_valid[:, None, None, :]), output, atol=1e-5)


def test_high_dimension_fraction_finds_sinusoidal_flat_dimensions():
  sinusoidal = sinusoidal_table(64, 64)
  assert diagnostics.high_dimension_fraction(sinusoidal) > 0.2
  assert diagnostics.high_dimension_fraction(np.random.default_rng(0).normal(size=(64, 64))) == 0.0
  for width in (128, 256, 200):  # Identical rows correlate in every block, the whole width included.
    assert diagnostics.high_dimension_fraction(np.tile(np.sin(np.arange(width)), (8, 1))) == 1.0
  legendre = legendre_table(64, 64)
  assert diagnostics.high_dimension_fraction(legendre) == 0.0


@pytest.mark.parametrize('encoding,kind,width', [
    ('none', 'none', None), ('sinusoidal', 'rows', 32), ('learned', 'rows', 32), ('rope', 'rows', 8),
    ('alibi', 'bias', None), ('t5', 'bias', None), ('chebyshev', 'rows', 32), ('legendre', 'rows', 32),
    ('kerple_log', 'bias', None), ('kerple_power', 'bias', None), ('fire', 'bias', None),
    ('dynamic_bias', 'bias', None),
    ('xpos', 'rows', 8), ('transformer_xl', 'content', None), ('cope', 'content', None)])
def test_every_encoding_has_a_diagnostic_representation(encoding, kind, width):
  options = encodings.REGISTRY[encoding].Options()
  found, values = diagnostics.representation(encoding, options, length=20, dim=32, num_heads=4, head_dim=8,
                                             params=None)
  assert found == kind
  if kind == 'rows':
    assert values.shape == (20, width)
  if encoding == 'legendre':
    np.testing.assert_allclose(values, legendre_table(20, 32), rtol=1e-6)
  if encoding == 'rope':  # [cos, sin] of the head's 4 frequencies (Su et al.: 10000^(-2k/8)) at each position.
    thetas = 10000.0 ** (-2 * np.arange(4) / 8)
    distances = np.arange(20)[:, None] - np.arange(20)[None, :]
    expected = np.cos(distances[..., None] * thetas).sum(-1)  # cos a cos b + sin a sin b = cos(a - b).
    np.testing.assert_allclose(values @ values.T, expected, atol=1e-5)
  if kind == 'bias':
    assert values.shape == (4, 20, 20)


@pytest.mark.parametrize('task', ['listops', 'translation'])
def test_the_transformer_a_config_describes_has_the_learned_tables_shape(task):
  """Diagnostics of a trained run rebuild its encoding from `transformer_of`: the shape the model trains."""
  if task == 'listops':  # Randomized positions: the table covers 100 positions, not the input's 65.
    config = lra.get_config('cpu')
    config.model.update(pos_encoding='learned', randomized_positions=100)
    model, inputs = listops_settings.create_model(config), (np.ones((1, 8), np.int32),)
  else:  # Decoded outputs may run past training's and evaluation's lengths: the table covers them.
    config = load_config('configs/translation/multi30k.py', 'tiny')
    config.model.pos_encoding = 'learned'
    config.decoding.max_output_length = max(config.data.max_length, config.data.max_eval_source_length) + 7
    model, inputs = create_translator(config, None, (50, 50)).model, (np.ones((1, 8), np.int32),) * 2
  params = model.init(jax.random.PRNGKey(0), *inputs, train=False)['params']
  transformer = TASKS[task].transformer_of(config)
  assert params['encoder']['pos_encoding']['table'].shape == (transformer.max_len, transformer.emb_dim)
  assert transformer.max_len == (100 if task == 'listops' else config.decoding.max_output_length)


@pytest.mark.slow
def test_diagnostics_of_a_trained_run_and_its_attention(tiny_sweep, tmp_path):
  output_dir, _ = tiny_sweep
  workdir = os.path.join(output_dir, 'learned', 'seed_0')
  diagnostics.main([f'--output_dir={tmp_path}', f'--workdir={workdir}', '--expression=[MAX 2 [MIN 4 7 ] 0 ]',
                    '--lengths=8,16'])
  with open(tmp_path / 'summary.json') as f:
    summary = json.load(f)
  assert summary['learned']['shape'] == [25, 16]  # data.max_length 24 + [CLS], emb_dim 16.
  attention = summary['attention']
  assert attention == {'expression': '[MAX 2 [MIN 4 7 ] 0 ]', 'label': 4, 'prediction': attention['prediction'],
                       'layers': 1, 'heads': 4}  # MAX(2, MIN(4, 7), 0) = 4.
  assert 0 <= attention['prediction'] < 10
  assert os.path.getsize(tmp_path / 'attention_learned.png') > 0
  with pytest.raises(ValueError, match="'\\[MUL'"):
    TASKS['listops'].attention_maps(workdir, '[MUL 2 3 ]', str(tmp_path / 'x.png'))
  # A run whose config asks for cuDNN is drawn on this CPU all the same, with the same prediction.
  cudnn_trained = str(tmp_path / 'cudnn_trained')
  shutil.copytree(workdir, cudnn_trained)
  config_path = os.path.join(cudnn_trained, CONFIG_FILE)
  config = read_json(config_path)
  config['model']['attention_implementation'] = 'cudnn'
  write_json(config_path, config)
  diagnostics.main([f'--output_dir={tmp_path / "cudnn"}', f'--workdir={cudnn_trained}',
                    '--expression=[MAX 2 [MIN 4 7 ] 0 ]', '--lengths=8,16'])
  with open(tmp_path / 'cudnn' / 'summary.json') as f:
    assert json.load(f)['attention'] == attention


@pytest.mark.parametrize('variant', lra.VARIANTS)
def test_every_listops_config_variant_is_valid(variant):
  config = lra.get_config(variant)
  listops_settings.create_model(config)
  options = listops.GeneratorOptions.from_spec(config.data.generator)
  assert options.shorter_than <= config.data.max_length + 1  # Every generated expression fits.
  assert config.data.num_classes == options.label_modulus


def test_every_committed_config_json_names_the_task_that_wrote_it():
  """The results/ folder holds config.json files of every task from every round; each is recognised (and
  upgrades to today's keys), translation runs under results/multi30k*, language models under results/lm_*,
  ListOps runs elsewhere."""
  paths = [os.path.join(directory, 'config.json')
           for directory, _, files in os.walk(os.path.join(ROOT, 'results')) if 'config.json' in files]
  assert len(paths) > 20
  for path in paths:
    with open(path) as f:
      config = json.load(f)
    relative = os.path.relpath(path, ROOT)
    expected = ('translation' if relative.startswith('results/multi30k') else
                'lm' if relative.startswith('results/lm_') else 'listops')
    assert task_of(config, CONFIG_HISTORIES) == expected == task_of(upgrade_old_config(config, CONFIG_HISTORIES),
                                                                  CONFIG_HISTORIES), path
    upgraded = ml_collections.ConfigDict(upgrade_old_config(config, CONFIG_HISTORIES))
    if expected == 'listops':  # Evaluation, length scores and diagnostics rebuild the model from it.
      listops_settings.read_scoring_settings(upgraded)
    elif expected == 'lm':  # Sampling rebuilds the model from it.
      lm_settings.read_model(upgraded.model, lm_settings.read_data(upgraded.data), vocab_size=66)
    else:  # Translation, decoding grids and length scores read its data, model and decoding.
      data = translation_settings.read_data(upgraded.data)
      translation_settings.read_model(upgraded.model, data, translation_settings.read_decoding(upgraded.decoding))
  with pytest.raises(ValueError, match=r"neither task nor any of \['data.generator', 'data.tokenizer'\]: no task of "
                                       r"\['listops', 'lm', 'translation'\] wrote it"):
    task_of({'data': {'data_dir': 'x'}}, CONFIG_HISTORIES)
  with pytest.raises(ValueError, match=r"a config with no task: no task of \['lm'\] wrote it"):
    task_of({'data': {'text_file': 'x'}}, TASKS['lm'].config_history)


def test_an_old_config_json_of_another_task_is_refused_naming_the_task_asked_for(tmp_path):
  (tmp_path / 'config.json').write_text(json.dumps({'data': {'generator': {}}, 'optimizer': {}, 'model': {}}))
  with pytest.raises(ValueError, match=(
      r"is not a translation workdir: config.json: a config with neither task nor any of \['data.tokenizer'\]: no "
      r"task of \['translation'\] wrote it; give a workdir of lra_posenc.translation.train")):
    read_config(str(tmp_path), TASKS['translation'].config_history)
  assert read_config(str(tmp_path), CONFIG_HISTORIES).task == 'listops'


def test_randomized_positions_cover_every_input_position_and_set_the_encodings_reach():
  config = lra.get_config('cpu')  # 64 tokens and the CLS token.
  config.model.randomized_positions = 64
  with pytest.raises(ValueError, match=r'model.randomized_positions=64 must be 0 \(off\) or at least the 65 '
                                       r'positions of an input \(data.max_length 64 and the CLS token\)'):
    listops_settings.create_model(config)
  config.model.update(randomized_positions=300, pos_encoding='learned')
  model = listops_settings.create_model(config)
  assert model.config.max_len == 300 and model.randomized_positions == 300
