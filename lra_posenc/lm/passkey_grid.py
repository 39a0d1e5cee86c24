"""The needle-in-a-haystack grid: passkey accuracy by window length and needle depth, a panel per encoding.

    python -m lra_posenc.lm.passkey_grid --runs=results/lm_shakespeare_char_cpu_passkey/runs \\
        --output=results/lm_shakespeare_char_cpu_passkey/passkey_grid.png [--split=validation]

Reads every VARIANT/seed_S/results.json under --runs that scored passkeys (lm/passkey.py) and draws, for each
variant, the mean accuracy over its seeds that learned retrieval in their own window (passkey.LEARNED_ACCURACY),
by scoring length (rows) and depth (columns: 0, the window's start, to 1, just before the query); a cell's needle
sits farther back than the training window where it is outlined. A variant none of whose seeds learned is drawn
empty, its panel saying so. Also writes the grid's numbers beside it as JSON (same name, .json).
"""
import os
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from lra_posenc import run_folders
from lra_posenc.lm.length_figure import figure_parser, write_numbers
from lra_posenc.lm.passkey import LEARNED_ACCURACY, retrieves
from lra_posenc.lm.scoring import PASSKEY
from lra_posenc.training.run_files import RESULTS_FILE, read_json_if_present


def grids(runs_dir: str, split: str) -> dict[str, dict]:
  """Variant -> {'block_size', 'seeds', 'learned' (the seeds that retrieve in their window), 'depths', and
  'lengths': length -> {'distances', 'accuracy' (per depth, the mean over the learned seeds)}, only the lengths
  measured, none where no seed learned}; variants in folder order, runs without passkey scores skipped."""
  variants = {}
  for directory in sorted(os.listdir(runs_dir)):
    variant_dir = os.path.join(runs_dir, directory)
    if not os.path.isdir(variant_dir):
      continue
    cells: dict[str, list] = {}
    entry = None
    for name in sorted(n for n in os.listdir(variant_dir) if n.startswith('seed_')):
      results = read_json_if_present(os.path.join(variant_dir, name, RESULTS_FILE))
      scores = results and results['test_sets'].get(split, {}).get(PASSKEY)
      if not scores:
        continue
      block_size = results['config']['data']['block_size']
      entry = entry or {'block_size': block_size, 'seeds': [], 'learned': [], 'lengths': {}}
      seed = run_folders.seed_of_run(os.path.join(variant_dir, name))
      entry['seeds'].append(seed)
      if not retrieves(scores, block_size):
        continue
      entry['learned'].append(seed)
      for length, score in scores.items():
        if 'by_depth' in score:
          entry['depths'] = [cell['depth'] for cell in score['by_depth']]
          entry['lengths'].setdefault(length, {'distances': [cell['distance'] for cell in score['by_depth']]})
          cells.setdefault(length, []).append([cell['accuracy'] for cell in score['by_depth']])
    if entry is None:
      continue
    for length, rows in cells.items():
      entry['lengths'][length]['accuracy'] = np.mean(rows, axis=0).tolist()
    variants[run_folders.spec_of_directory(directory)] = entry
  return variants


def draw(variants: dict[str, dict], path: str, *, title: str) -> None:
  columns = min(4, len(variants))
  rows = -(-len(variants) // columns)
  figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.8 * rows), squeeze=False)
  image = None
  for ax, (variant, entry) in zip(axes.flat, variants.items()):
    lengths = sorted(entry['lengths'], key=int)
    ax.set_title(f"{variant}\n{len(entry['learned'])} of {len(entry['seeds'])} seeds retrieve", fontsize='small')
    if not lengths:
      ax.text(0.5, 0.5, f'no seed reaches {LEARNED_ACCURACY:.0%}\nin its own window', ha='center', va='center',
              transform=ax.transAxes, fontsize='small')
      ax.set_xticks([]), ax.set_yticks([])
      continue
    grid = np.array([entry['lengths'][length]['accuracy'] for length in lengths])
    image = ax.imshow(grid, vmin=0, vmax=1, cmap='viridis', aspect='auto', origin='lower')
    for row, length in enumerate(lengths):
      for column, distance in enumerate(entry['lengths'][length]['distances']):
        if distance >= entry['block_size']:  # Farther back than any needle in training.
          ax.add_patch(plt.Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, edgecolor='white', lw=0.8))
    ax.set_yticks(range(len(lengths)), lengths)
    ax.set_xticks(range(len(entry['depths'])), [f'{d:.1f}' for d in entry['depths']], fontsize='x-small')
    ax.set(xlabel='needle depth (0: window start)', ylabel='window (tokens)')
  for ax in list(axes.flat)[len(variants):]:
    ax.axis('off')
  if image is not None:
    figure.colorbar(image, ax=axes, shrink=0.8, label='exact-match accuracy')
  figure.suptitle(title)
  figure.savefig(path, dpi=120, bbox_inches='tight')
  plt.close(figure)


def main(argv: Sequence[str] | None = None) -> None:
  args = figure_parser(__doc__.split('\n\n')[0], 'Passkey retrieval by length and depth (mean over the seeds that '
                       'retrieve; outlined: farther back than the training window)').parse_args(argv)
  variants = grids(args.runs, args.split)
  if not variants:
    raise SystemExit(f'{args.runs}: no finished run with passkey scores')
  draw(variants, args.output, title=args.title)
  write_numbers(args.output, variants)
  print(f'wrote {args.output}: {len(variants)} variants')


if __name__ == '__main__':
  main()
