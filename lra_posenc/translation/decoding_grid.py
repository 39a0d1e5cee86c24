"""Scores a trained translation workdir's decoding over a grid of beam sizes and length penalties.

    python -m lra_posenc.translation.decoding_grid --workdir=runs/multi30k_tiny --split=val \\
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
from lra_posenc.translation import bleu
from lra_posenc.translation import train as translation_train
from lra_posenc.translation.settings import CONFIG_HISTORY
from lra_posenc.translation.translate import CHECKPOINTS, load_translator
from lra_posenc.validation import comma_separated


def search_grid(beam_sizes: Sequence[int], length_penalties: Sequence[float]) -> list[tuple[int, float | None]]:
  """(beam size, length penalty) pairs; greedy search (beam 1) once, without a penalty."""
  return [(beam, None if beam == 1 else penalty) for beam in beam_sizes
          for penalty in (length_penalties[:1] if beam == 1 else length_penalties)]


def decoding_grid(workdir: str, split: str, beam_sizes: Sequence[int], length_penalties: Sequence[float],
                  checkpoint: str = 'best') -> dict:
  """Both BLEUs of every setting on `split`, with what was decoded and from which steps."""
  translator, params, steps, data = load_translator(workdir, checkpoint, reads_text=True)
  text = translation_train.read_text(data, split)
  rows = []
  for beam_size, length_penalty in search_grid(beam_sizes, length_penalties):
    hypotheses = translator.with_search(beam_size=beam_size, length_penalty=length_penalty or 0.0).translate(
        params, text.sources)
    scores = bleu.scores(hypotheses, text.targets, data)
    rows.append({'beam_size': beam_size, 'length_penalty': length_penalty} | scores)
    print(f'beam {beam_size}, length penalty {length_penalty}: sacreBLEU {scores["bleu"]:.2f}, '
          f'tokenized BLEU {scores["tokenized_bleu"]:.2f}', flush=True)
  return {'workdir': workdir, 'split': split, 'checkpoint': checkpoint, 'steps': steps, 'sentences': len(text.sources),
          'rows': rows}


def markdown_table(grid: dict) -> str:
  """Rows: beam size; columns: length penalty; cells: tokenized BLEU / sacreBLEU."""
  penalties = list(dict.fromkeys(row['length_penalty'] for row in grid['rows'] if row['length_penalty'] is not None))
  lines = ['| beam | ' + ' | '.join(f'alpha {p}' for p in penalties) + ' |',
           '| --- |' + ' --- |' * len(penalties)]
  for beam in dict.fromkeys(row['beam_size'] for row in grid['rows']):
    cells = {row['length_penalty']: f'{row["tokenized_bleu"]:.2f} / {row["bleu"]:.2f}'
             for row in grid['rows'] if row['beam_size'] == beam}
    lines.append(f'| {beam} | ' + ' | '.join(cells.get(p, cells.get(None, '')) for p in penalties) + ' |')
  return '\n'.join(lines) + '\n'


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
