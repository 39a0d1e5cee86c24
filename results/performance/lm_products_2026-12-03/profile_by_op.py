"""Where the LM `:cpu` train step (nanoGPT form, the trainer's pmapped step) spends its time on XLA:CPU: each
compiled instruction's thread time over 10 traced steps, then by kind (YNNPACK products, YNNPACK reductions, XLA
loop fusions) and by the JAX operation that made it. From the repository root:

    [XLA_FLAGS=...] .venv/bin/python results/performance/lm_products_2026-12-03/profile_by_op.py [lm1b]
"""
import collections, glob, os, re, sys, tempfile
import jax
sys.path.insert(0, 'scripts')
from side_by_side_lm import our_config
from lra_posenc import benchmarking
from lra_posenc.tasks import TASKS
config = our_config('configs/lm/shakespeare_char.py', 'cpu', lm1b_form=len(sys.argv) > 1 and sys.argv[1] == 'lm1b')
timer = benchmarking.TrainStepTimer(TASKS['lm'].benchmark_workload(config))
timer.run_window(5)
hlo = timer._step.as_text()
steps = 10
with tempfile.TemporaryDirectory() as d:
  jax.profiler.start_trace(d); s = timer.run_window(steps); jax.profiler.stop_trace()
  trace, = glob.glob(os.path.join(d, '**', '*.xplane.pb'), recursive=True)
  prof = jax.profiler.ProfileData.from_file(trace)
spent, calls = collections.Counter(), collections.Counter()
for plane in prof.planes:
  for line in plane.lines:
    if not line.name.startswith('tf_XLA'): continue
    for e in line.events:
      if '::' in e.name or e.name.startswith('end: '): continue
      spent[e.name] += e.duration_ns; calls[e.name] += 1
print('step ms', s / steps * 1e3, 'sum of ops ms', sum(spent.values()) / steps / 1e6)
shapes = {}
for line in hlo.splitlines():
  m = re.match(r'\s*(?:ROOT )?%?([\w.\-]+) = (\S+) (\w+(?:-\w+)?)\((.*)', line)
  if m: shapes[m.group(1)] = (m.group(2), m.group(3), m.group(4)[:150])
for name, ns in spent.most_common(40):
  sh = shapes.get(name, ('?', '?', ''))
  print(f'{ns/steps/1e3:8.1f} us {calls[name]/steps:4.1f}x {name:32s} {sh[0][:40]:40s} {sh[2][:110]}')
comps = {}
for m in re.finditer(r'^%(fused_computation[\.\d]*) .*?\{\n(.*?)\n\}', hlo, re.S | re.M):
  comps[m.group(1)] = m.group(2)
cat = collections.Counter(); ccount = collections.Counter()
for line in hlo.splitlines():
  m = re.match(r'\s*(?:ROOT )?%([\w.\-]+) = (\S+) fusion\(.*?kind=(\w+), calls=%([\w.]+)', line)
  if not m or m.group(1) not in spent: continue
  body = comps.get(m.group(4), '')
  if ' dot(' in body:
    k = 'dot'
  elif ' reduce(' in body: k = 'reduce'
  else: k = 'elementwise'
  k = ('ynn_' if 'ynn' in m.group(1) else 'xla_') + k
  cat[k] += spent[m.group(1)]; ccount[k] += calls[m.group(1)]
for k, v in cat.most_common(): print(f'{k:20s} {v/steps/1e6:7.2f} ms/step {ccount[k]/steps:5.0f} calls')
other = sum(v for n, v in spent.items()) - sum(cat.values())
print('not fusions', other/steps/1e6)
groups = collections.Counter(); gcalls = collections.Counter()
for line in hlo.splitlines():
  m = re.match(r'\s*(?:ROOT )?%([\w.\-]+) = (\S+) (\S+)\(.*?op_name="([^"]*)"', line)
  if not m or m.group(1) not in spent: continue
  if 'ynn' in m.group(1): continue
  op = m.group(4)
  op = re.sub(r'block_\d+', 'block_N', op)
  op = re.sub(r'^jit\(_fun\)/', '', op)
  key = op[:90]
  groups[key] += spent[m.group(1)]; gcalls[key] += calls[m.group(1)]
print('--- non-ynn by op_name')
for k, v in groups.most_common(40): print(f'{v/steps/1e3:8.1f} us {gcalls[k]/steps:5.0f}x {k}')
