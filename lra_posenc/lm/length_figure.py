"""Loss against scoring length, one line per encoding (ALiBi's Figure 1), from a study's committed run folders.

    python -m lra_posenc.lm.length_figure --runs=results/lm_shakespeare_char_cpu/runs \\
        --output=results/lm_shakespeare_char_cpu/loss_by_length.png [--split=validation]

Reads every VARIANT/seed_S/results.json under --runs (the scores by length that training wrote) and draws each
variant's mean loss over its seeds at each window length, the spread over seeds as a band, in one panel per family
of encodings (absolute, rotary, bias, content: by what the encoding's terms are), so that no panel holds more lines
than its colours; RoPE-style stretches scored zero-shot ('by_length_OPTION') and randomized positions read at
0, 1, 2, ... are dashed lines. A length an encoding cannot represent has no point. Also writes the figure's numbers
beside it as JSON (same name, .json).
"""
import argparse
import json
import os
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from lra_posenc import encodings, run_folders
from lra_posenc.data.files import written_whole
from lra_posenc.lm.scoring import SEQUENTIAL, length_score_sets
from lra_posenc.training.run_files import RESULTS_FILE, read_json_if_present

FAMILIES = ('absolute', 'rotary', 'bias', 'content')  # The panels, in this order.
SEQUENTIAL_LABEL = 'at 0, 1, 2, ...'  # A model with randomized positions read at sequential positions.


def curves(runs_dir: str, split: str) -> dict[str, dict[int, list[float]]]:
  """Line label -> window length -> the losses of the seeds that scored it: 'VARIANT', 'VARIANT, OPTION
  stretched' for each zero-shot stretch, and 'VARIANT, at 0, 1, 2, ...' for a model with randomized positions read
  at sequential ones; variants in folder order, runs without results.json skipped."""
  lines: dict[str, dict[int, list[float]]] = {}
  for directory in sorted(os.listdir(runs_dir)):
    variant_dir = os.path.join(runs_dir, directory)
    if not os.path.isdir(variant_dir):
      continue
    spec = run_folders.spec_of_directory(directory)
    for name in sorted(n for n in os.listdir(variant_dir) if n.startswith('seed_')):
      results = read_json_if_present(os.path.join(variant_dir, name, RESULTS_FILE))
      if results is None:
        continue
      scores = results['test_sets'].get(split)
      if scores is None:
        raise ValueError(f'{os.path.join(variant_dir, name, RESULTS_FILE)}: no test split {split!r}; it has '
                         f'{sorted(results["test_sets"])}')
      for option, by_length in length_score_sets(scores):
        label = (spec if not option else f'{spec}, {SEQUENTIAL_LABEL}' if option == SEQUENTIAL
                 else f'{spec}, {option} stretched')
        for length, score in by_length.items():
          if 'loss' in score:
            lines.setdefault(label, {}).setdefault(int(length), []).append(score['loss'])
  return lines


def summary(lines: dict[str, dict[int, list[float]]]) -> dict[str, dict[str, dict]]:
  """Label -> length -> mean_and_std of the seeds' losses (with the count)."""
  return {label: {str(length): run_folders.mean_and_std(losses) for length, losses in sorted(by_length.items())}
          for label, by_length in lines.items()}


def family(label: str) -> str:
  """The panel a line belongs in, by what its encoding's terms are (traced, not named): 'rotary' (turns queries
  and keys), 'content' (logits that read them: Transformer-XL, CoPE, DAPE), 'bias' (a logit bias), or 'absolute'
  (added to the inputs, or nothing)."""
  terms = encodings.default_terms(run_folders.parse_variant(label.split(', ')[0]).encoding)
  if terms.query_rotary is not None:
    return 'rotary'
  if terms.content is not None:
    return 'content'
  return 'bias' if terms.bias is not None else 'absolute'


def draw(lines: dict[str, dict[int, list[float]]], path: str, *, split: str, title: str) -> None:
  """One panel per family (`FAMILIES`), each line its own colour within its panel, the spread over seeds as a band;
  the panels share their axes, so levels compare across them."""
  panels = {name: {label: by_length for label, by_length in lines.items() if family(label) == name}
            for name in FAMILIES}
  panels = {name: panel for name, panel in panels.items() if panel}
  columns = min(2, len(panels))
  rows = -(-len(panels) // columns)
  figure, axes = plt.subplots(rows, columns, figsize=(7.5 * columns, 6.5 * rows), sharex=True, sharey=True,
                              squeeze=False)
  ticks = sorted({length for by_length in lines.values() for length in by_length})
  for ax in axes.flat[len(panels):]:
    ax.set_visible(False)
  for ax, (name, panel) in zip(axes.flat, panels.items()):
    ax.set_prop_cycle(color=plt.get_cmap('tab10' if len(panel) <= 10 else 'tab20').colors)
    for label, by_length in panel.items():
      lengths = sorted(by_length)
      means = np.array([np.mean(by_length[length]) for length in lengths])
      spreads = np.array([np.std(by_length[length], ddof=1) if len(by_length[length]) > 1 else 0.0
                          for length in lengths])
      seeds = max(len(losses) for losses in by_length.values())
      linestyle = '-' if ', ' not in label else '--'
      (line,) = ax.plot(lengths, means, marker='o', markersize=3, linestyle=linestyle, label=f'{label} (n={seeds})')
      ax.fill_between(lengths, means - spreads, means + spreads, color=line.get_color(), alpha=0.12)
    ax.set_xscale('log', base=2)
    ax.set_xticks(ticks, [str(length) for length in ticks])
    ax.set(title=name, xlabel='scoring window (tokens)', ylabel=f'{split} loss per token (nats)')
    ax.xaxis.set_tick_params(labelbottom=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize='small', loc='upper left', frameon=True, framealpha=0.85)
  figure.suptitle(title)
  figure.tight_layout()
  figure.savefig(path, dpi=120, bbox_inches='tight')
  plt.close(figure)


def figure_parser(description: str, title: str) -> argparse.ArgumentParser:
  """The arguments of a study's figure: its run folders, the PNG (its numbers beside it), the split, the title."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument('--runs', required=True, help='A study folder of VARIANT/seed_S run folders.')
  parser.add_argument('--output', required=True, help='The PNG to write; its numbers go beside it as .json.')
  parser.add_argument('--split', default='validation', help="The scored split (results.json's test_sets).")
  parser.add_argument('--title', default=title)
  return parser


def write_numbers(output: str, numbers: dict) -> None:
  """A figure's numbers beside its PNG `output`, as JSON of the same name."""
  with written_whole(os.path.splitext(output)[0] + '.json') as f:
    json.dump(numbers, f, indent=2)


def main(argv: Sequence[str] | None = None) -> None:
  parser = figure_parser(__doc__.split('\n\n')[0], 'Loss against scoring length (mean over seeds, band: std)')
  parser.add_argument('--exclude', default='', help='Comma-separated variants (folder specs) not drawn.')
  parser.add_argument('--plain_stretches', action='store_true',
                      help='Draw zero-shot stretches only of variants without overrides.')
  args = parser.parse_args(argv)
  excluded = set(filter(None, args.exclude.split(',')))
  lines = {label: by_length for label, by_length in curves(args.runs, args.split).items()
           if label.split(', ')[0] not in excluded
           and not (args.plain_stretches and label.endswith(' stretched') and ':' in label.split(', ')[0])}
  if not lines:
    raise SystemExit(f'{args.runs}: no finished run with scores by length')
  draw(lines, args.output, split=args.split, title=args.title)
  write_numbers(args.output, summary(lines))
  print(f'wrote {args.output}: {len(lines)} lines')


if __name__ == '__main__':
  main()
