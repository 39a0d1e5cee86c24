"""results/ holds data only; the A/B benchmarks that back PERFORMANCE.md live in benchmarks/, each importable and
answering --help without measuring anything."""
import glob
import importlib
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = sorted(path for path in glob.glob(os.path.join(ROOT, 'benchmarks', '*.py'))
                    if not path.endswith('__init__.py'))


def test_results_hold_no_python_files():
  found = [os.path.relpath(os.path.join(directory, name), ROOT)
           for directory, _, files in os.walk(os.path.join(ROOT, 'results')) for name in files if name.endswith('.py')]
  assert found == [], f'results/ is data only; move these to benchmarks/ or delete them: {sorted(found)}'


def test_there_are_benchmarks():
  assert BENCHMARKS


@pytest.mark.parametrize('path', BENCHMARKS, ids=os.path.basename)
def test_a_benchmark_imports_and_its_help_exits_0(path, capsys):
  name = f'benchmarks.{os.path.splitext(os.path.basename(path))[0]}'
  module = importlib.import_module(name)  # Measures nothing: the measurement runs only under __main__.
  assert module.__doc__, path
  if not hasattr(module, 'main'):  # What the benchmarks share, not a benchmark.
    return
  with pytest.raises(SystemExit) as exited:
    module.main(['--help'])
  assert exited.value.code == 0 and 'usage' in capsys.readouterr().out.lower()


def test_a_benchmark_runs_as_its_documented_command():
  process = subprocess.run([sys.executable, '-m', 'benchmarks.dense_products_ab', '--help'], cwd=ROOT,
                           env=os.environ | {'JAX_PLATFORMS': 'cpu'}, capture_output=True, text=True, timeout=120,
                           check=False)
  assert process.returncode == 0 and 'usage' in process.stdout.lower(), process.stderr[-2000:]
