"""Loss against scoring length, one line per encoding (ALiBi's Figure 1), from a study's committed run folders.

    python -m lra_posenc.lm.length_figure --runs=results/lm_shakespeare_char_cpu/runs \\
        --output=results/lm_shakespeare_char_cpu/loss_by_length.png [--split=validation]

Reads every VARIANT/seed_S/results.json under --runs (the scores by length that training wrote) and draws each
variant's mean loss over its seeds at each window length, the spread over seeds as a band; RoPE-style stretches
scored zero-shot ('by_length_OPTION') are dashed or dotted lines of their variant's colour. A length an encoding
cannot represent has no point. Also writes the figure's numbers beside it as JSON (same name, .json).
"""
import argparse
import json
import os
from collections.abc import Sequence

import numpy as np

from lra_posenc import sweeps
from lra_posenc.data.files import written_whole
from lra_posenc.lm.scoring import length_score_sets
from lra_posenc.training.workdir import RESULTS_FILE, read_json_if_present


def curves(runs_dir: str, split: str) -> dict[str, dict[int, list[float]]]:
  """Line label -> window length -> the losses of the seeds that scored it: 'VARIANT', and 'VARIANT, OPTION
  stretched' for each zero-shot stretch; variants in folder order, runs without results.json skipped."""
  lines: dict[str, dict[int, list[float]]] = {}
  for directory in sorted(os.listdir(runs_dir)):
    variant_dir = os.path.join(runs_dir, directory)
    if not os.path.isdir(variant_dir):
      continue
    spec = sweeps.spec_of_directory(directory)
    for name in sorted(n for n in os.listdir(variant_dir) if n.startswith('seed_')):
      results = read_json_if_present(os.path.join(variant_dir, name, RESULTS_FILE))
      if results is None:
        continue
      scores = results['test_sets'].get(split)
      if scores is None:
        raise ValueError(f'{os.path.join(variant_dir, name, RESULTS_FILE)}: no test split {split!r}; it has '
                         f'{sorted(results["test_sets"])}')
      for option, by_length in length_score_sets(scores):
        label = f'{spec}, {option} stretched' if option else spec
        for length, score in by_length.items():
          if 'loss' in score:
            lines.setdefault(label, {}).setdefault(int(length), []).append(score['loss'])
  return lines


def summary(lines: dict[str, dict[int, list[float]]]) -> dict[str, dict[str, dict]]:
  """Label -> length -> mean_and_std of the seeds' losses (with the count)."""
  return {label: {str(length): sweeps.mean_and_std(losses) for length, losses in sorted(by_length.items())}
          for label, by_length in lines.items()}


def draw(lines: dict[str, dict[int, list[float]]], path: str, *, split: str, title: str) -> None:
  figure, axes = sweeps.comparison_figure(len([label for label in lines if 'stretched' not in label]))
  colours, dashes = {}, ('--', ':', '-.')
  options = sorted({label.split(', ')[1] for label in lines if ', ' in label})
  for label, by_length in lines.items():
    lengths = sorted(by_length)
    means = np.array([np.mean(by_length[length]) for length in lengths])
    spreads = np.array([np.std(by_length[length], ddof=1) if len(by_length[length]) > 1 else 0.0
                        for length in lengths])
    seeds = max(len(losses) for losses in by_length.values())
    variant = label.split(', ')[0]
    style = {'color': colours[variant]} if variant in colours else {}
    linestyle = dashes[options.index(label.split(', ')[1]) % len(dashes)] if ', ' in label else '-'
    (line,) = axes.plot(lengths, means, marker='o', linestyle=linestyle, label=f'{label} (n={seeds})', **style)
    colours.setdefault(variant, line.get_color())
    axes.fill_between(lengths, means - spreads, means + spreads, color=line.get_color(), alpha=0.15)
  axes.set_xscale('log', base=2)
  ticks = sorted({length for by_length in lines.values() for length in by_length})
  axes.set_xticks(ticks, [str(length) for length in ticks])
  axes.set(xlabel='scoring window (tokens)', ylabel=f'{split} loss per token (nats)', title=title)
  sweeps.save_line_plot(figure, axes, path, legend_title='encoding')


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--runs', required=True, help='A study folder of VARIANT/seed_S run folders.')
  parser.add_argument('--output', required=True, help='The PNG to write; its numbers go beside it as .json.')
  parser.add_argument('--split', default='validation', help="The scored split (results.json's test_sets).")
  parser.add_argument('--title', default='Loss against scoring length (mean over seeds, band: std)')
  args = parser.parse_args(argv)
  lines = curves(args.runs, args.split)
  if not lines:
    raise SystemExit(f'{args.runs}: no finished run with scores by length')
  draw(lines, args.output, split=args.split, title=args.title)
  with written_whole(os.path.splitext(args.output)[0] + '.json') as f:
    json.dump(summary(lines), f, indent=2)
  print(f'wrote {args.output}: {len(lines)} lines')


if __name__ == '__main__':
  main()
