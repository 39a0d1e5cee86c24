import collections, glob, json, os, re, sys, tempfile
import jax
from lra_posenc import benchmarking
from lra_posenc.config_files import load_config
from lra_posenc.tasks import TASKS
out = {}
for bias in (False, True):
  c = load_config('configs/lm/shakespeare_char.py', 'cpu'); c.data.text_file = 'unused'; c.model.use_bias = bias
  timer = benchmarking.TrainStepTimer(TASKS[c.task].benchmark_workload(c))
  timer.run_window(5)
  with tempfile.TemporaryDirectory() as d:
    jax.profiler.start_trace(d); secs = timer.run_window(10); jax.profiler.stop_trace()
    trace, = glob.glob(os.path.join(d, '**', '*.xplane.pb'), recursive=True)
    prof = jax.profiler.ProfileData.from_file(trace)
  spent = collections.Counter()
  for plane in prof.planes:
    for line in plane.lines:
      if not line.name.startswith('tf_XLA'): continue
      for e in line.events:
        if '::' in e.name or e.name.startswith('end: '): continue
        spent[e.name] += e.duration_ns / 10 / 1e6
  out[bias] = spent
  print(bias, f'{secs/10*1e3:.1f} ms/step')
names = set(out[False]) | set(out[True])
diff = sorted(names, key=lambda n: out[True].get(n, 0) - out[False].get(n, 0))
for n in diff[:25]:
  print(f'{n:40s} nobias {out[False].get(n,0):7.2f} bias {out[True].get(n,0):7.2f}')
