"""results/ holds data only; the A/B benchmarks that back PERFORMANCE.md live in benchmarks/, each importable and
answering --help without measuring anything."""
import glob
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = sorted(glob.glob(os.path.join(ROOT, 'benchmarks', '*.py')))


def test_results_hold_no_python_files():
  found = [os.path.relpath(os.path.join(directory, name), ROOT)
           for directory, _, files in os.walk(os.path.join(ROOT, 'results')) for name in files if name.endswith('.py')]
  assert found == [], f'results/ is data only; move these to benchmarks/ or delete them: {sorted(found)}'


def test_there_are_benchmarks():
  assert BENCHMARKS


@pytest.mark.parametrize('path', BENCHMARKS, ids=os.path.basename)
def test_a_benchmark_imports_and_its_help_exits_0(path):
  name = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(f'benchmarks_{name}', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)  # Measures nothing: the measurement runs only under __main__.
  assert module.__doc__ and callable(module.main), path
  env = os.environ | {'PYTHONPATH': ROOT, 'JAX_PLATFORMS': 'cpu'}
  process = subprocess.run([sys.executable, path, '--help'], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120, check=False)
  assert process.returncode == 0, process.stderr[-2000:]
  assert 'usage' in process.stdout.lower()
