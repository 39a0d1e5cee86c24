#!/usr/bin/env python3
"""Scores a trained translation workdir's decoding over a grid of beam sizes and length penalties.

    python scripts/decoding_grid.py --workdir=runs/multi30k_tiny --split=val \\
        --beam_sizes=1,4,5,8 --length_penalties=0.6,1.0,1.4 [--checkpoint=averaged]

Each setting translates every source of --split (the config's validation split by default)
with the workdir's best checkpoint, or with the mean of the parameters its last evaluations
kept (--checkpoint=averaged, `evaluation.average_last`, as training scores it), and scores both
BLEUs of the task (sacreBLEU and the tokenized lowercased BLEU). Beam size 1 is greedy search,
which has no length penalty. Choose the setting on the validation split, then score that one
on the test splits: a choice made on a test split counts that split's noise as a gain.

Writes WORKDIR/decoding_grid/CHECKPOINT_SPLIT.json (or --output) and prints a Markdown table.
"""
import argparse
import json
import os
from collections.abc import Sequence

from lra_posenc.data.files import written_whole
from lra_posenc.training.checkpointing import read_config
from lra_posenc.translation.decoding_grid import decoding_grid, markdown_table
from lra_posenc.translation.settings import CONFIG_HISTORY
from lra_posenc.translation.translate import CHECKPOINTS
from lra_posenc.validation import comma_separated


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--workdir', required=True, help='A workdir written by lra_posenc.translation.train.')
  parser.add_argument('--split', help="The split to score (default: the config's data.validation_split).")
  parser.add_argument('--beam_sizes', default='1,4,5,8', help='Comma-separated beam sizes (1: greedy).')
  parser.add_argument('--length_penalties', default='0.6,1.0,1.4', help='Comma-separated GNMT length penalties.')
  parser.add_argument('--checkpoint', choices=CHECKPOINTS, default='best',
                      help='The best checkpoint, or the mean of the last evaluated ones.')
  parser.add_argument('--output', help='JSON path (default: WORKDIR/decoding_grid/CHECKPOINT_SPLIT.json).')
  args = parser.parse_args(argv)
  try:
    beam_sizes = comma_separated('--beam_sizes', args.beam_sizes, int, at_least=1)
    length_penalties = comma_separated('--length_penalties', args.length_penalties, float, at_least=0)
  except ValueError as error:
    parser.error(str(error))
  try:
    split = args.split or read_config(args.workdir, CONFIG_HISTORY).data.validation_split
  except ValueError as error:
    parser.error(f'--workdir: {error}')
  grid = decoding_grid(args.workdir, split, beam_sizes, length_penalties, args.checkpoint)
  output = args.output or os.path.join(args.workdir, 'decoding_grid', f'{args.checkpoint}_{split}.json')
  os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
  with written_whole(output) as f:
    json.dump(grid, f, indent=1)
  print(f'{split}, {args.checkpoint} checkpoint (steps {grid["steps"]}), tokenized BLEU / sacreBLEU:')
  print(markdown_table(grid))


if __name__ == '__main__':
  main()
