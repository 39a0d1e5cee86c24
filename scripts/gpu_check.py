#!/usr/bin/env python3
"""A quick check of a GPU machine: devices, attention paths, speed, memory and a short LRA run, one summary.

On a fresh GPU machine (the README's "GPU check" names the wheels to add):
    python scripts/gpu_check.py --out=results/gpu_check
It prints the devices; runs the attention-path tests (tests/test_attention.py: XLA and cuDNN
against a float64 oracle); benchmarks the LRA-standard ListOps step and the base translation
step in bfloat16 with attention_implementation 'auto' (cuDNN wherever it can serve a call) and
'xla' (steps/s, MFU, memory, the path each call took); trains 200 LRA-standard ListOps steps;
and writes OUT/summary.json (every command, its status, time and figures) and OUT/summary.md.
On an H100 (2026-11-24) the parts took about 1, 3, 6 and 2 minutes: compiling is most of it,
and the base translation step on cuDNN spent a further 2 minutes after its compiles, not yet
explained. Where one command may run only 10 minutes, split them: --parts=tests,listops,training
then --parts=translation, each with its own --out. With --tiny the same runs at CPU sizes in about
a minute: the test suite runs it, so the check cannot rot before a GPU is at hand.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARK = [sys.executable, os.path.join(ROOT, 'scripts', 'benchmark.py'), '--eval=false', '--decode=false']

# (name, task, config, encodings, overrides), at the size each mode runs; tiny models compile in seconds.
TINY_MODEL = ['--config.model.num_layers=1', '--config.model.emb_dim=32', '--config.model.qkv_dim=32',
              '--config.model.mlp_dim=64', '--config.training.batch_size=8']
BENCHMARKS = {
    False: [('listops_lra', 'listops', 'configs/listops/lra.py', 'none,alibi,legendre', []),
            ('translation_base', 'translation', 'configs/translation/multi30k.py', 'none', [])],
    True: [('listops_cpu', 'listops', 'configs/listops/lra.py:cpu', 'none,alibi', TINY_MODEL),
           ('translation_cpu', 'translation', 'configs/translation/multi30k.py:sweep', 'rope',
            TINY_MODEL + ['--config.data.tokenizer.vocab_size=256', '--config.data.max_length=16'])],
}
TIMING = {False: ['--windows=3', '--steps_per_window=10'], True: ['--windows=1', '--steps_per_window=2']}
# Training: LRA-standard with its attention dropout (so XLA serves attention; the summary says why),
# on a freshly generated train set just large enough for the steps.
TRAINING = {
    False: ['--config=configs/listops/lra.py', '--config.training.num_train_steps=200',
            '--config.data.generator.num_train_samples=6400', '--config.data.generator.num_valid_samples=512',
            '--config.data.generator.num_test_samples=512', '--config.evaluation.every_steps=100',
            '--config.checkpoint.every_steps=200'],
    True: ['--config=configs/listops/lra.py:cpu', *TINY_MODEL, '--config.training.num_train_steps=20',
           '--config.data.generator.num_train_samples=640', '--config.data.generator.num_valid_samples=64',
           '--config.data.generator.num_test_samples=64', '--config.evaluation.every_steps=10',
           '--config.checkpoint.every_steps=20', '--config.training.log_every_steps=10'],
}
TESTS = {False: ['-m', 'not slow', '-k', 'oracle or cudnn or remat'],
         True: ['-m', 'not slow', '-k', 'oracle and (t5 or rope)']}
# Seconds allowed per step; on an H100 the base translation step on cuDNN took 218 s.
TIMEOUT_SECONDS = {'tests': 120, 'benchmark': 300, 'training': 150}
PARTS = ('tests', 'listops', 'translation', 'training')


def run_step(name: str, command: list[str], timeout: float, log_dir: str) -> dict:
  """Runs `command` from the repository root; its output goes to LOG_DIR/NAME.log, its status to the summary."""
  print(f'[{name}] {" ".join(command)}', flush=True)
  start = time.perf_counter()
  with open(os.path.join(log_dir, f'{name}.log'), 'w') as log:
    try:
      returncode = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
      returncode = None
  seconds = time.perf_counter() - start
  with open(os.path.join(log_dir, f'{name}.log')) as log:
    tail = log.read()[-2000:]
  status = 'ok' if returncode == 0 else ('timed out' if returncode is None else f'failed ({returncode})')
  print(f'[{name}] {status} in {seconds:.0f} s', flush=True)
  return {'command': command, 'status': status, 'seconds': seconds, 'output_tail': tail}


def devices() -> dict:
  import jax  # Here, not at the top: the steps run in processes of their own.
  return {'jax': jax.__version__, 'backend': jax.default_backend(),
          'devices': [{'platform': d.platform, 'device_kind': d.device_kind,
                       'compute_capability': getattr(d, 'compute_capability', None)} for d in jax.devices()]}


def benchmark_figures(path: str) -> tuple[str, dict]:
  """The reference encoding, and per encoding: steps/s, step time against the reference's, MFU, memory and
  the attention paths."""
  with open(path) as f:
    measured = json.load(f)
  return measured['reference'], {name: {'steps_per_second': run['train']['steps_per_second'], 'step_time_ratio': run['step_time_ratio'],
                 'mfu': run['train']['mfu'], 'compiled_gib': run['train']['compiled_bytes_per_device'] / 2**30,
                 'peak_gib': (run['train']['peak_bytes_in_use'] or 0) / 2**30 or None,
                 'attention': {call: path['implementation'] + (f" ({path['reason']})" if path['reason'] else '')
                               for call, path in run['attention'].items()}}
          for name, run in measured['encodings'].items()}


def check(out: str, tiny: bool, parts: Sequence[str] = PARTS) -> dict:
  logs = os.path.join(out, 'logs')
  os.makedirs(logs, exist_ok=True)
  summary = {'tiny': tiny, 'parts': list(parts), 'started': time.strftime('%Y-%m-%dT%H:%M:%S%z'), **devices()}
  print(json.dumps({k: summary[k] for k in ('jax', 'backend', 'devices')}, indent=1), flush=True)

  if 'tests' in parts:
    summary['attention_tests'] = run_step('attention_tests', [sys.executable, '-m', 'pytest', '-q', '-p',
                                                              'no:cacheprovider', 'tests/test_attention.py',
                                                              *TESTS[tiny]], TIMEOUT_SECONDS['tests'], logs)
  summary['benchmarks'] = {}
  for name, task, config, names, overrides in BENCHMARKS[tiny]:
    if task not in parts:
      continue
    for implementation in ('auto', 'xla'):
      label = f'{name}_{implementation}'
      figures = os.path.join(out, f'{label}.json')
      step = run_step(label, [*BENCHMARK, f'--task={task}', f'--config={config}', '--config.model.dtype=bfloat16',
                              '--config.model.attention_dropout_rate=0.0',
                              f'--config.model.attention_implementation={implementation}',
                              *overrides, f'--encodings={names if implementation == "auto" else "none"}',
                              *TIMING[tiny],
                              f'--out={figures}'], TIMEOUT_SECONDS['benchmark'], logs)
      if step['status'] == 'ok':
        step['reference'], step['figures'] = benchmark_figures(figures)
      summary['benchmarks'][label] = step

  if 'training' in parts:
    summary['training'] = train(out, tiny, logs)
  steps = [*summary['benchmarks'].values(),
           *(summary[key] for key in ('attention_tests', 'training') if key in summary)]
  summary['all_ok'] = all(s['status'] == 'ok' for s in steps)
  with open(os.path.join(out, 'summary.json'), 'w') as f:
    json.dump(summary, f, indent=2)
  with open(os.path.join(out, 'summary.md'), 'w') as f:
    f.write(markdown(summary))
  return summary


def train(out: str, tiny: bool, logs: str) -> dict:
  """The short LRA ListOps training step, with the figures of its results.json."""
  workdir = os.path.join(out, 'listops_training')
  step = run_step('training', [sys.executable, '-m', 'lra_posenc.listops.train', f'--workdir={workdir}',
                               *TRAINING[tiny], '--config.model.dtype=bfloat16'], TIMEOUT_SECONDS['training'], logs)
  if step['status'] == 'ok':
    with open(os.path.join(workdir, 'results.json')) as f:
      results = json.load(f)
    step['figures'] = {key: results[key] for key in ('best_step', 'test', 'baselines', 'attention',
                                                      'train_seconds_this_run', 'steps_this_run')}
  return step


def markdown(summary: dict) -> str:
  """The summary as a reader wants it: one line per step, one row per benchmarked encoding."""
  kinds = ', '.join(sorted({d['device_kind'] for d in summary['devices']}))
  lines = [f'# GPU check ({"tiny" if summary["tiny"] else "full"}; {", ".join(summary["parts"])}), '
           f'{summary["started"]}', '',
           f'jax {summary["jax"]}, backend {summary["backend"]}: {len(summary["devices"])} x {kinds}', '']
  if 'attention_tests' in summary:
    tests = summary['attention_tests']
    lines += [f'- attention tests: {tests["status"]} ({tests["output_tail"].strip().splitlines()[-1:]})', '']
  lines += ['| run | encoding | steps/s | time / reference | MFU | compiled GiB | peak GiB | attention |',
           '| --- | --- | --- | --- | --- | --- | --- | --- |']
  for label, step in summary['benchmarks'].items():
    for name, fig in step.get('figures', {'-': None}).items():
      if fig is None:
        lines.append(f'| {label} | - | {step["status"]} | | | | | |')
        continue
      mfu = '-' if fig['mfu'] is None else f'{fig["mfu"]:.1%}'
      peak = '-' if fig['peak_gib'] is None else f'{fig["peak_gib"]:.2f}'
      paths = '; '.join(f'{call}: {path}' for call, path in fig['attention'].items())
      marked = f'{name} (reference)' if name == step['reference'] else name
      lines.append(f'| {label} | {marked} | {fig["steps_per_second"]:.2f} | {fig["step_time_ratio"]:.3f} | {mfu} | '
                   f'{fig["compiled_gib"]:.2f} | {peak} | {paths} |')
  training = summary.get('training', {})
  if training:
    lines += ['', f'- LRA ListOps training: {training["status"]} in {training["seconds"]:.0f} s']
  if 'figures' in training:
    fig = training['figures']
    lines.append(f'  - best step {fig["best_step"]}, test accuracy {fig["test"]["accuracy"]:.3f} (majority class '
                 f'{fig["baselines"]["test_majority_class_accuracy"]:.3f}), {fig["steps_this_run"]} steps in '
                 f'{fig["train_seconds_this_run"]:.0f} s; attention: {fig["attention"]}')
  lines += ['', f'All steps ok: {summary["all_ok"]}', '']
  return '\n'.join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--out', required=True, help='Folder for summary.json, summary.md, logs and run files.')
  parser.add_argument('--tiny', action='store_true', help='CPU sizes (about a minute): what the test suite runs.')
  parser.add_argument('--parts', default=','.join(PARTS), help=f'Comma-separated, of {", ".join(PARTS)}.')
  args = parser.parse_args()
  parts = args.parts.split(',')
  if unknown := sorted(set(parts) - set(PARTS)):
    parser.error(f'--parts: {", ".join(unknown)} not among {", ".join(PARTS)}')
  summary = check(args.out, args.tiny, parts)
  print(markdown(summary))
  sys.exit(0 if summary['all_ok'] else 1)


if __name__ == '__main__':
  main()
