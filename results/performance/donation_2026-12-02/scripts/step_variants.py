import sys; sys.path.insert(0, "/tmp/sv")
from variants import *
def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--peer_models', default='/tmp/wmt_models.py')
  parser.add_argument('--windows', type=int, default=8)
  parser.add_argument('--steps', type=int, default=5)
  parser.add_argument('--output')
  cli = parser.parse_args()
  args = argparse.Namespace(layers=3, dim=256, heads=4, mlp=1024, batch=32, length=32, vocab=8000, dropout=0.0,
                            encoding='sinusoidal', dtype='float32')
  workload = translation_train.benchmark_workload(sbs.our_config(args))
  timers = {}
  import functools
  def no_donate(task):
    return (jax.pmap(functools.partial(steps.accumulating_train_step, task=task), axis_name=steps.AXIS),
            jax.pmap(functools.partial(steps.eval_step, task=task), axis_name=steps.AXIS))
  for name, fn, donate in (('current', ORIGINAL, True), ('cond', variant('cond', 'all'), True),
                           ('no_donation', ORIGINAL, False)):
    steps.train_step = fn
    benchmarking.pmapped_steps = steps.pmapped_steps if donate else no_donate
    timers[name] = benchmarking.TrainStepTimer(workload)
  benchmarking.pmapped_steps = steps.pmapped_steps
  steps.train_step = ORIGINAL
  timers['peer'] = sbs.PeerStepTimer(cli.peer_models, args)
  seconds = benchmarking.interleaved_windows(timers, windows=cli.windows, steps_per_window=cli.steps)
  ms = {n: 1e3 * statistics.median(s) / cli.steps for n, s in seconds.items()}
  out = {'cpu': provenance.describe_cpu(provenance.host_cpu()), 'jax': jax.__version__, 'ms_per_step': ms,
         'ratio_to_peer': {n: m / ms['peer'] for n, m in ms.items()},
         'window_seconds': seconds}
  print(json.dumps({k: out[k] for k in ('cpu', 'ms_per_step', 'ratio_to_peer')}, indent=1))
  if cli.output:
    json.dump(out, open(cli.output, 'w'), indent=1)

main()
