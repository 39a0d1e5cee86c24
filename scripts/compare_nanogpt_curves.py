#!/usr/bin/env python3
"""Validation loss against step: our language-model runs beside nanoGPT's own train.py, in one figure and JSON.

    .venv/bin/python scripts/compare_nanogpt_curves.py \\
        --ours=results/lm_shakespeare_char_cpu/runs/learned --nanogpt_logs=/tmp/nanogpt_train_seed0.log,... \\
        [--nanogpt_whole_split=1.9164,...] --output=curves.png

--ours is a variant folder of seed_S run folders (each metrics.jsonl's validation log-likelihood, over the whole
split); --nanogpt_logs are the printouts of nanoGPT's train.py, whose lines 'step N: train loss X, val loss Y' give
its estimate on `eval_iters` random batches. --nanogpt_whole_split, where given, is each nanoGPT run's best
checkpoint scored on the whole split as ours are (one value per log), drawn at the last step. Writes the PNG and,
beside it, a JSON of every curve.
"""
import argparse
import glob
import json
import os
import re

import matplotlib.pyplot as plt

from lra_posenc.data.files import written_whole
from lra_posenc.training.run_files import read_history

NANOGPT_LINE = re.compile(r'^step (\d+): train loss ([\d.]+), val loss ([\d.]+)$')


def nanogpt_curve(path: str) -> dict[int, float]:
  """Step -> validation loss, from the lines nanoGPT's train.py prints at each evaluation."""
  with open(path) as f:
    curve = {int(m[1]): float(m[3]) for m in map(NANOGPT_LINE.match, f.read().splitlines()) if m}
  if not curve:
    raise ValueError(f"{path}: no 'step N: train loss X, val loss Y' line; not a nanoGPT train.py printout")
  return curve


def our_curve(run_dir: str) -> dict[int, float]:
  """Step -> validation loss (minus the log-likelihood per token) of one of our runs."""
  return {int(row['step']): -row['log_likelihood'] for row in read_history(run_dir, 'validation')}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--ours', required=True, help='A variant folder of seed_S runs.')
  parser.add_argument('--nanogpt_logs', required=True, help='Comma-separated printouts of nanoGPT train.py.')
  parser.add_argument('--nanogpt_whole_split', default='', help='Comma-separated: each run scored as ours are.')
  parser.add_argument('--output', required=True)
  args = parser.parse_args()
  curves = {f'ours {os.path.basename(run)}': our_curve(run) for run in sorted(glob.glob(os.path.join(args.ours, 'seed_*')))}
  logs = args.nanogpt_logs.split(',')
  for index, path in enumerate(logs):
    curves[f'nanoGPT run {index}'] = nanogpt_curve(path)
  whole = [float(value) for value in args.nanogpt_whole_split.split(',') if value]
  if whole and len(whole) != len(logs):
    parser.error(f'--nanogpt_whole_split has {len(whole)} values for {len(logs)} logs')
  figure, axes = plt.subplots(figsize=(9, 5))
  for label, curve in curves.items():
    steps = sorted(step for step in curve if step > 0)
    axes.plot(steps, [curve[step] for step in steps], marker='o', markersize=3, label=label,
              linestyle='-' if label.startswith('ours') else '--')
  for index, value in enumerate(whole):
    last = max(curves[f'nanoGPT run {index}'])
    axes.plot([last], [value], marker='x', color='black', label='nanoGPT, whole split' if index == 0 else None)
  axes.set(xlabel='step', ylabel='validation loss (nats per character)',
           title='Ours (whole split) against nanoGPT (random batches; x: whole split)')
  axes.grid(alpha=0.3)
  axes.legend(fontsize='small')
  figure.tight_layout()
  figure.savefig(args.output, dpi=110)
  with written_whole(os.path.splitext(args.output)[0] + '.json') as f:
    json.dump({'curves': curves, 'nanogpt_whole_split': whole}, f, indent=2)
  for label, curve in curves.items():
    print(label, ' '.join(f'{step}:{loss:.4f}' for step, loss in sorted(curve.items())))


if __name__ == '__main__':
  main()
