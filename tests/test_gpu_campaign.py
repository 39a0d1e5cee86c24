"""The GPU campaign's tiny mode on this CPU: every step it takes on a GPU, at CPU sizes, so that it cannot rot."""
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from lra_posenc.config_files import config_of_flags, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAMPAIGN = [sys.executable, os.path.join(ROOT, 'scripts', 'gpu_campaign.py')]
FINISHING = 'study/runs/none/seed_0'
TINY_RUN = ('listops --config=configs/listops/lra.py:cpu --config.model.num_layers=1 --config.model.emb_dim=32 '
            '--config.model.qkv_dim=32 --config.model.mlp_dim=64 --config.training.log_every_steps=2 '
            '--config.evaluation.every_steps=4 --config.checkpoint.every_steps=4 '
            '--config.data.data_dir={generated_data} '
            '--config.data.generator.num_train_samples=640 --config.data.generator.num_valid_samples=64 '
            '--config.data.generator.num_test_samples=64')


@pytest.mark.slow
def test_the_tiny_campaign_benchmarks_then_runs_the_plan_by_the_deadline_and_returns_few_files(tmp_path):
  """A run that finishes comes back whole; one that cannot finish is stopped at the deadline and still brings
  its metrics; a committed one is not run again; everything returned is a handful of small files."""
  plan = tmp_path / 'plan.txt'
  plan.write_text('# Two tiny runs, each named by the folder it is committed to.\n'
                  f'{FINISHING} {TINY_RUN.replace("listops", "listops JAX_DEFAULT_MATMUL_PRECISION=highest", 1)} '
                  '--config.training.num_train_steps=8\n'
                  f'endless {TINY_RUN} --config.training.num_train_steps=1000000 --config.model.pos_encoding=alibi\n'
                  f'study/runs/committed/seed_0 {TINY_RUN}\n')
  (tmp_path / 'committed' / 'study' / 'runs' / 'committed' / 'seed_0').mkdir(parents=True)
  (tmp_path / 'committed' / 'study' / 'runs' / 'committed' / 'seed_0' / 'results.json').write_text('{}')
  out = tmp_path / 'out'
  campaign = [*CAMPAIGN, '--tiny', f'--work={tmp_path / "work"}', f'--plan={plan}',
              f'--committed={tmp_path / "committed"}', '--least_seconds=20', '--grace_seconds=10']
  process = subprocess.run([*campaign, f'--out={out}', '--benchmarks=lra', '--budget_seconds=80', '--parallel=2'],
                           cwd=ROOT, capture_output=True, text=True, timeout=400)
  assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
  assert sorted(os.listdir(out)) == ['benchmarks.tar.gz', 'runs.tar.gz', 'summary.json', 'summary.md',
                                     'traces_lra.tar.gz']
  summary = json.loads((out / 'summary.json').read_text())
  lra = summary['benchmarks']['lra']
  assert lra['status'] == 'ok' and sorted(lra['figures']) == ['alibi', 'none']
  assert lra['figures']['none']['steps_per_second'] > 0
  runs = summary['runs']
  assert sorted(runs) == ['endless', FINISHING] and summary['skipped_as_committed'] == ['study/runs/committed/seed_0']
  assert runs[FINISHING]['status'] == 'finished' and runs[FINISHING]['step'] == 8
  assert 0 <= runs[FINISHING]['test']['accuracy'] <= 1 and runs[FINISHING]['compile_seconds'] > 0
  assert runs['endless']['status'] == 'stopped at the deadline' and runs['endless']['last_train_step'] >= 2
  assert runs['endless']['beside'] == 1  # It shared the device with the finishing run.
  assert runs[FINISHING]['env'] == {'JAX_DEFAULT_MATMUL_PRECISION': 'highest'} and runs['endless']['env'] == {}
  with tarfile.open(out / 'runs.tar.gz') as tar:
    names = {member.name for member in tar.getmembers() if member.isfile()}
    results = json.load(tar.extractfile(f'runs/{FINISHING}/results.json'))
  assert results['provenance']['default_matmul_precision'] == 'highest'  # The plan's setting reached the run.
  assert names == {f'runs/{FINISHING}/{name}' for name in ('results.json', 'metrics.jsonl', 'config.json', 'train.log')
                   } | {f'runs/endless/{name}' for name in ('metrics.jsonl', 'config.json', 'train.log')}
  with tarfile.open(out / 'traces_lra.tar.gz') as tar:
    assert any(name.endswith('.xplane.pb') for name in tar.getnames())
  text = (out / 'summary.md').read_text()
  assert f'| {FINISHING} | finished |' in text and '| endless | stopped at the deadline |' in text

  # A second command in the same work folder, as on a machine still warm: the data, the benchmark and the
  # finished run are kept, and the stopped run resumes from its checkpoint.
  again = tmp_path / 'again'
  process = subprocess.run([*campaign, f'--out={again}', '--benchmarks=lra', '--budget_seconds=45'],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
  # One set, shared by the runs whose configs generate the same data, written once and kept.
  (generated,) = (tmp_path / 'work' / 'generated_data').iterdir()
  assert 'kept the matching' in (generated / 'generate.log').read_text()
  summary = json.loads((again / 'summary.json').read_text())
  assert summary['benchmarks']['lra'] == lra | {'status': 'ok, in an earlier command'}
  runs = summary['runs']
  assert runs[FINISHING]['status'] == 'finished in an earlier command' and runs[FINISHING]['step'] == 8
  assert runs['endless']['status'] == 'stopped at the deadline'
  assert 'resum' in (tmp_path / 'work' / 'runs' / 'endless' / 'train.log').read_text().lower()


def test_a_failed_run_fails_the_command_after_the_summary_is_written(tmp_path):
  """A run that fails (here a config the trainer refuses, or data that cannot be generated) makes the exit status
  non-zero, naming it, and the summary still comes back with its status and log; a later run still runs."""
  plan = tmp_path / 'plan.txt'
  plan.write_text(f'study/runs/bad/seed_0 {TINY_RUN} --config.model.pos_encoding=no_such_encoding\n'
                  f'study/runs/no_data/seed_0 {TINY_RUN} --config.data.generator.max_depth=0\n'
                  f'{FINISHING} {TINY_RUN} --config.training.num_train_steps=2\n')
  out = tmp_path / 'out'
  process = subprocess.run([*CAMPAIGN, '--tiny', f'--out={out}', f'--work={tmp_path / "work"}', f'--plan={plan}',
                            f'--committed={tmp_path / "committed"}', '--benchmarks=', '--budget_seconds=200',
                            '--least_seconds=5'], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert process.returncode == 1, process.stdout[-3000:] + process.stderr[-3000:]
  assert 'failed: study/runs/bad/seed_0, study/runs/no_data/seed_0;' in process.stderr
  runs = json.loads((out / 'summary.json').read_text())['runs']
  assert runs['study/runs/bad/seed_0']['status'].startswith('failed (') and runs[FINISHING]['status'] == 'finished'
  # A set that could not be generated fails its runs, not the others.
  assert runs['study/runs/no_data/seed_0']['status'].startswith('failed (generating its data: ')
  with tarfile.open(out / 'runs.tar.gz') as tar:
    assert 'no_such_encoding' in tar.extractfile('runs/study/runs/bad/seed_0/train.log').read().decode()


def test_a_bad_plan_line_is_named_by_file_and_line(tmp_path):
  plan = tmp_path / 'plan.txt'
  plan.write_text('# fine\nok listops --config=configs/listops/lra.py:cpu\nbroken sideways --config=x\n')
  process = subprocess.run([*CAMPAIGN, '--tiny', f'--out={tmp_path / "out"}', f'--plan={plan}', '--benchmarks='],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert process.returncode != 0
  assert f'{plan}:3: expected NAME TASK [VARIABLE=VALUE...] FLAGS... with TASK one of' in process.stderr


@pytest.mark.parametrize('line, error', [
    ('../elsewhere listops --config=x', 'a relative folder such as STUDY/runs/VARIANT/seed_S'),
    ('/abs/path listops --config=x', 'a relative folder'),
    ('study/runs/x/seed_0 listops PRECISION=highest', 'expected NAME TASK [VARIABLE=VALUE...] FLAGS...'),
    ('study/runs/x/seed_0 lm --config.data.text_file={dat}/a.txt',
     '{dat}: a flag may name only {data} and {generated_data}'),
    ('study/runs/x/seed_0 lm --config.data.text_file={generated_data}/a.txt', "task 'lm' generates no data"),
])
def test_a_plan_line_names_a_folder_under_results_and_has_flags(tmp_path, line, error):
  import gpu_campaign  # noqa: PLC0415
  plan = tmp_path / 'plan.txt'
  plan.write_text(line + '\n')
  with pytest.raises(ValueError, match=re.escape(error)):
    gpu_campaign.read_plan(str(plan))


def test_the_committed_plan_reads_and_names_each_run_once():
  import gpu_campaign  # noqa: PLC0415
  plan = gpu_campaign.read_plan(gpu_campaign.PLAN)
  assert plan[0].name == 'listops_lra_fused/runs/none/seed_0' and len({run.name for run in plan}) == len(plan)
  tiny = [run for run in plan if '--config=configs/translation/multi30k.py:tiny' in run.flags]
  assert tiny and all(run.env == (('JAX_DEFAULT_MATMUL_PRECISION', 'highest'),) for run in tiny)
  for run in plan:  # Each names its data, and only ListOps runs wait for the generated set.
    path_flags = [flag for flag in run.command_flags('/d', '/gen')
                  if flag.split('=', 1)[0] in ('--config.data.data_dir', '--config.data.text_file')]
    assert path_flags and all(flag.split('=', 1)[1].startswith(('/d/', '/gen')) for flag in path_flags), run.name
    assert run.needs_generated_data == (run.task == 'listops'), run.name
  # The LRA runs share one generated set: the one their config's generator describes, in the folder's name.
  sets = gpu_campaign.data_sets(plan, '/work', '/d')
  assert set(sets) == {run.name for run in plan if run.needs_generated_data}
  ((folder, command),) = set((folder, tuple(command)) for folder, command in sets.values())
  generator = load_config(os.path.join(ROOT, 'configs', 'listops', 'lra.py'), 'fused').data.generator
  assert folder.startswith('/work/generated_data/listops_') and f'--output_dir={folder}' in command
  assert {f'--{key}={value}' for key, value in generator.items()} <= set(command)
  learned = next(run for run in plan if run.name == 'lm_shakespeare_char/runs/learned/seed_0')
  assert '--config.data.text_file=/d/tinyshakespeare/input.txt' in learned.command_flags('/d', '/gen')


def test_a_plan_lines_config_is_the_config_file_with_its_overrides_and_refuses_an_unknown_key():
  """What the campaign reads of a run's flags (for the data it generates) is what its trainer's flags give."""
  path = os.path.join(ROOT, 'configs', 'listops', 'lra.py')
  flags = [f'--config={path}:cpu', '--config.data.generator.num_train_samples=640', '--config.model.pos_encoding=alibi',
           '--workdir=/not/a/config/flag']
  expected = load_config(path, 'cpu')
  expected.data.generator.num_train_samples, expected.model.pos_encoding = 640, 'alibi'
  assert config_of_flags(flags).to_dict() == expected.to_dict()
  with pytest.raises(AttributeError, match='no_such_key'):
    config_of_flags([f'--config={path}:cpu', '--config.model.no_such_key=1'])
  # A planned run whose flags give no config is named before anything starts.
  import gpu_campaign  # noqa: PLC0415
  run = gpu_campaign.PlannedRun('study/runs/x/seed_0', 'listops', (f'--config={path}:cpu', '--config.model.nokey=1',
                                                                   '--config.data.data_dir={generated_data}'))
  for flags, error in (((f'--config={path}:cpu', '--config.model.nokey=1'), 'config.model.nokey is not a config key'),
                       ((f'--config={path}:cpu', '--config.data.generator.seed=x'), 'config.data.generator.seed'),
                       (('--config.data.generator.seed=1',), 'config.data.generator.seed')):  # No --config.
    run = gpu_campaign.PlannedRun('study/runs/x/seed_0', 'listops', (*flags, '--config.data.data_dir={generated_data}'))
    with pytest.raises(ValueError, match=re.escape(f'run study/runs/x/seed_0: ') + '.*' + re.escape(error)):
      gpu_campaign.data_sets([run], '/work', '/d')


def test_every_benchmark_of_both_variants_is_a_command_of_this_repository_the_campaign_fills_in():
  """The GPU variant of configs/gpu_benchmarks.py runs only on a lent GPU: its commands are checked here."""
  import gpu_campaign  # noqa: PLC0415
  variants = {tiny: gpu_campaign.benchmarks(tiny, '/peer.py', '/w/{name}.json', '/w/traces/{name}')
              for tiny in (False, True)}
  assert list(variants[False]) == list(variants[True]) == ['lra', 'tiny', 'base', 'side_by_side', 'attention']
  for commands in variants.values():
    for name, (command, seconds) in commands.items():
      assert command[0] == sys.executable and seconds > 0
      assert not re.search(r'\{\w*\}', ' '.join(command)), (name, command)  # Every placeholder filled in.
      # The program: a file of this repository, or a module of its package (`-m lra_posenc.studies.benchmark`).
      files = [word for word in command[1:] if word.endswith('.py') and not word.startswith(('-', '/'))]
      files += [command[i + 1].replace('.', '/') + '.py' for i, word in enumerate(command[:-1])
                if word == '-m' and command[i + 1].startswith('lra_posenc.')]
      assert files and all(os.path.exists(os.path.join(ROOT, file)) for file in files), (name, files)
      if name != 'attention':  # The figures (and the profiles) come back where the campaign reads them.
        assert f'--out=/w/{name}.json' in command or f'--output=/w/{name}.json' in command, (name, command)
        assert (f'--trace_dir=/w/traces/{name}' in command) == (name != 'side_by_side'), (name, command)
      if '--peer_models=/peer.py' in command:
        assert name == 'side_by_side'
