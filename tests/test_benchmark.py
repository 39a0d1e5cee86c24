"""scripts/benchmark.py runs the trainer's step for each encoding and reports consistent figures."""
import json
import os
import sys

SCRIPTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'scripts')


def test_benchmark_reports_every_encoding_against_the_first(tmp_path, capsys):
  sys.path.insert(0, SCRIPTS_DIR)
  import benchmark
  out = tmp_path / 'benchmark.json'
  benchmark.main(['--encodings=none,rope', '--windows=2', '--steps_per_window=2', f'--out={out}'])
  results = json.loads(out.read_text())
  assert list(results['encodings']) == ['none', 'rope']
  none, rope = results['encodings']['none'], results['encodings']['rope']
  assert none['step_time_ratio'] == 1.0 and len(rope['window_steps_per_second']) == 2
  assert rope['step_time_ratio'] == none['steps_per_second'] / rope['steps_per_second']
  assert rope['tokens_per_second'] == rope['steps_per_second'] * 32 * 64  # The ':cpu' batch and length.
  assert 'rope' in capsys.readouterr().out
