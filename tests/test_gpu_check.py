"""The GPU check's tiny mode on this CPU: every step it would run on a GPU, at CPU sizes, so it cannot rot."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
  assert summary['benchmarks']['translation_cpu_xla']['figures']['none']['attention']['cross-attention'] == (
      'xla (model.attention_implementation=xla)')
  training = summary['training']['figures']
  assert training['steps_this_run'] == 20 and 0 <= training['test']['accuracy'] <= 1
  assert training['attention'] == {'encoder self-attention': {
      'implementation': 'xla', 'reason': 'cuDNN fused attention needs an NVIDIA GPU; the device is cpu (cpu)'}}
  with open(tmp_path / 'summary.md') as f:
    assert 'All steps ok: True' in f.read()
