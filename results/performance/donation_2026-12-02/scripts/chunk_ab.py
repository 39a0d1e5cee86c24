import argparse, json, statistics, sys
import jax
sys.path.insert(0, '/work/main/scripts')
import side_by_side_wmt as sbs
from lra_posenc import benchmarking
from lra_posenc.training import provenance
from lra_posenc.translation import train as translation_train
args = argparse.Namespace(layers=3, dim=256, heads=4, mlp=1024, batch=32, length=32, vocab=8000, dropout=0.0,
                          encoding='sinusoidal', dtype='float32')
timers = {}
for chunk in (0, 256, 1024):
  config = sbs.our_config(args)
  config.loss.chunk_tokens = chunk
  timers[f'chunk_{chunk or "auto(128)"}'] = benchmarking.TrainStepTimer(translation_train.benchmark_workload(config))
timers['peer'] = sbs.PeerStepTimer('/tmp/wmt_models.py', args)
seconds = benchmarking.interleaved_windows(timers, windows=8, steps_per_window=5)
ms = {n: 1e3 * statistics.median(s) / 5 for n, s in seconds.items()}
out = {'cpu': provenance.describe_cpu(provenance.host_cpu()), 'ms_per_step': ms,
       'ratio_to_peer': {n: m / ms['peer'] for n, m in ms.items()}, 'window_seconds': seconds}
print(json.dumps({k: out[k] for k in ('cpu', 'ms_per_step', 'ratio_to_peer')}))
json.dump(out, open(sys.argv[1], 'w'), indent=1)
