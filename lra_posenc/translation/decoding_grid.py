"""BLEU of a trained translation workdir's decoding over a grid of beam sizes and length penalties."""
from collections.abc import Sequence

from lra_posenc.translation import bleu
from lra_posenc.translation import train as translation_train
from lra_posenc.translation.translate import load_translator


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
