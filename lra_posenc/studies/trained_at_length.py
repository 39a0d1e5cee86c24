"""Trained at L and scored at kL, against trained at kL (ALiBi's Figure 1 comparison), from committed run files.

    python -m lra_posenc.studies.trained_at_length --task=lm --trained_at_l=results/lm_shakespeare_char_cpu/runs \\
        --trained_at_kl=results/lm_shakespeare_char_cpu_at_length/runs \\
        --output=results/lm_shakespeare_char_cpu_at_length/table.md

--trained_at_kl holds runs of `ENCODING:data.block_size=kL:training.batch_size=B` (the same steps, about as many
tokens per step); each is scored in its own windows, as the task's rows record it ('validation loss at N'). For
every such variant and length, the table gives the loss at kL of the variant trained at L (in --trained_at_l, its
spec without those two overrides) and trained at kL, mean ± std over seeds, their difference (trained at L minus
trained at kL: above 0 where training at kL is better) and Welch's p over seeds, Holm-adjusted over every
comparison of the table.
"""
import argparse
import os
from collections.abc import Sequence

from lra_posenc import run_folders, tasks
from lra_posenc.data.files import written_whole
from lra_posenc.studies import report


def losses(task: tasks.TaskSpec, runs_dir: str) -> dict[tuple[str, int], dict[int, float]]:
  """(variant spec, block size) -> seed -> {scored length: loss} for every finished run under `runs_dir`."""
  table: dict[tuple[str, int], dict[int, dict[int, float]]] = {}
  for run in report.read_source(os.path.dirname(runs_dir), os.path.basename(runs_dir), task):
    variant = run_folders.parse_variant(run['variant'])
    block_size = int(dict(variant.overrides).get('data.block_size', 0))
    # The variant as trained at L: its spec without the window and the batch that fits it.
    spec = ':'.join(part for part in run['variant'].split(':')
                    if part.split('=')[0] not in ('data.block_size', 'training.batch_size'))
    scores = {int(key.split()[-1]): value for key, value in run.items()
              if key.startswith('validation loss at ') and len(key.split()) == 4 and value is not None}
    table.setdefault((spec, block_size), {})[run['seed']] = scores
  return table


def rows(task: tasks.TaskSpec, trained_at_l: str, trained_at_kl: str) -> list[dict]:
  """A row per (encoding, kL) of --trained_at_kl: the two sides' losses at kL over seeds, difference, Welch p
  and Holm p."""
  short, long = losses(task, trained_at_l), losses(task, trained_at_kl)
  result = []
  for (spec, length), seeds in sorted(long.items(), key=lambda item: (item[0][1], item[0][0])):
    if not length:
      raise SystemExit(f'{trained_at_kl}: {spec} has no data.block_size override: not a run trained at kL')
    base = short.get((spec, 0))
    if base is None:
      raise SystemExit(f'{trained_at_l}: no runs of {spec}, trained at L, to set beside those at {length}')
    sides = {'at L': [scores.get(length) for scores in base.values()],
             'at kL': [scores.get(length) for scores in seeds.values()]}
    stats = {side: run_folders.mean_and_std(values) | {'values': values} for side, values in sides.items()}
    row = {'encoding': spec, 'length': length, 'stats': stats,
           'delta': (stats['at L']['mean'] - stats['at kL']['mean'])
                    if None not in (stats['at L']['mean'], stats['at kL']['mean']) else None}
    as_rows = [{'stats': {'loss': stats[side]}} for side in sides]  # As report.welch reads a table's rows.
    row['welch_p'], row['welch_missing'] = (report.welch(*as_rows, 'loss') if row['delta'] is not None
                                            else (None, 'not measured'))
    result.append(row)
  for row, adjusted in zip(result, report.holm([row['welch_p'] for row in result])):
    row['holm_p'] = adjusted
  return result


def markdown(table: Sequence[dict]) -> str:
  lines = ['| encoding | scored at | n (L, kL) | trained at L | trained at kL | L minus kL | Welch p (Holm) |',
           '| --- | --- | --- | --- | --- | --- | --- |']
  for row in table:
    at_l, at_kl = row['stats']['at L'], row['stats']['at kL']
    cell = lambda stats: run_folders.mean_std_cell(stats, 3) if stats['mean'] is not None else 'not measured'
    delta = f"{row['delta']:+.3f}" if row['delta'] is not None else '-'
    p = (report.p_cell(row['welch_p']) + f" ({report.p_cell(row['holm_p'])})" if row['welch_p'] is not None
         else row['welch_missing'])
    lines.append(f"| {row['encoding']} | {row['length']} | {at_l['count']}, {at_kl['count']} | {cell(at_l)} | "
                 f"{cell(at_kl)} | {delta} | {p} |")
  return '\n'.join(lines) + '\n'


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--task', required=True, type=tasks.argument, help=tasks.ARGUMENT_HELP)
  parser.add_argument('--trained_at_l', required=True, help='The study trained at L: VARIANT/seed_S run folders.')
  parser.add_argument('--trained_at_kl', required=True, help='The runs trained at kL: VARIANT/seed_S run folders.')
  parser.add_argument('--output', default='', help='Where to write the Markdown table (else standard output).')
  args = parser.parse_args(argv)
  text = markdown(rows(args.task, args.trained_at_l, args.trained_at_kl))
  if args.output:
    with written_whole(args.output) as f:
      f.write(text)
  print(text, end='')


if __name__ == '__main__':
  main()
