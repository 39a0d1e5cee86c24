"""The GPU check's tiny mode on this CPU: every step it would run on a GPU, at CPU sizes, so it cannot rot."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'scripts'))

import gpu_check  # noqa: E402


@pytest.mark.slow
def test_gpu_check_tiny_mode_runs_every_step_and_writes_one_summary(tmp_path):
  process = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'gpu_check.py'), '--tiny',
                            f'--out={tmp_path}'], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
  with open(tmp_path / 'summary.json') as f:
    summary = json.load(f)
  assert summary['all_ok'] and summary['devices'][0]['platform'] == 'cpu'
  assert 'passed' in summary['attention_tests']['output_tail']
  assert sorted(summary['benchmarks']) == ['listops_cpu_auto', 'listops_cpu_xla', 'translation_cpu_auto',
                                           'translation_cpu_xla']
  cpu_reason = 'xla (cuDNN fused attention needs an NVIDIA GPU; the device is cpu (cpu))'
  listops = summary['benchmarks']['listops_cpu_auto']['figures']
  assert sorted(listops) == ['alibi', 'none'] and listops['none']['steps_per_second'] > 0
  assert listops['alibi']['attention'] == {'encoder self-attention': cpu_reason}
  # Each benchmark's ratios divide by its first encoding's step time: none's here, rope's where rope runs alone.
  assert summary['benchmarks']['listops_cpu_auto']['reference'] == 'none'
  assert summary['benchmarks']['translation_cpu_auto']['reference'] == 'rope'
  assert summary['benchmarks']['translation_cpu_xla']['figures']['none']['attention']['cross-attention'] == (
      'xla (model.attention_implementation=xla)')
  training = summary['training']['figures']
  assert training['steps_this_run'] == 20 and 0 <= training['test']['accuracy'] <= 1
  assert training['attention'] == {'encoder self-attention': {
      'implementation': 'xla', 'reason': 'cuDNN fused attention needs an NVIDIA GPU; the device is cpu (cpu)'}}
  with open(tmp_path / 'summary.md') as f:
    assert 'All steps ok: True' in f.read()


def test_parts_run_alone_and_an_unknown_part_is_refused_by_name(tmp_path):
  """A GPU call limited to 10 minutes runs the check in parts; a summary of one part has only its rows."""
  process = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'gpu_check.py'), '--tiny',
                            f'--out={tmp_path}', '--parts=tests,bogus'], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
  assert process.returncode == 2 and '--parts: bogus not among tests, listops, translation, training' in process.stderr
  figures = {'none': {'steps_per_second': 2.0, 'step_time_ratio': 1.0, 'mfu': 0.125, 'compiled_gib': 1.0,
                      'peak_gib': None, 'attention': {}}}
  step = {'status': 'ok', 'reference': 'none', 'figures': figures}
  summary = {'tiny': False, 'parts': ['translation'], 'started': 'then', 'jax': '0', 'backend': 'gpu',
             'devices': [{'device_kind': 'H100'}], 'benchmarks': {'translation_base_auto': step}, 'all_ok': True}
  text = gpu_check.markdown(summary)
  assert '| translation_base_auto | none (reference) | 2.00 | 1.000 | 12.5% |' in text
  assert 'attention tests' not in text and 'LRA ListOps training' not in text and 'All steps ok: True' in text
