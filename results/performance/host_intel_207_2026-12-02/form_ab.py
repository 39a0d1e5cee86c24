"""A/B of our LM :cpu step's form: activation x biases, in one process, interleaved windows."""
import json, statistics, sys
from lra_posenc import benchmarking
from lra_posenc.config_files import load_config
from lra_posenc.tasks import TASKS
def config(activation, bias):
  c = load_config('configs/lm/shakespeare_char.py', 'cpu'); c.data.text_file = 'unused'
  c.model.update(activation=activation, use_bias=bias); return c
forms = {f'{a}_bias{b}': config(a, b) for a in ('gelu', 'relu') for b in (False, True)}
timers = {n: benchmarking.TrainStepTimer(TASKS[c.task].benchmark_workload(c)) for n, c in forms.items()}
seconds = benchmarking.interleaved_windows(timers, windows=8, steps_per_window=5)
out = {n: 1e3 * statistics.median(s) / 5 for n, s in seconds.items()}
print(json.dumps(out, indent=1)); json.dump(out, open(sys.argv[1], 'w'), indent=1)
