#!/usr/bin/env python3
"""Looks inside positional encodings: what each one gives a position, and how positions relate.

    python scripts/diagnostics.py --encodings=sinusoidal,chebyshev,legendre,rope --length=512 --dim=128 \\
        --output_dir=runs/diagnostics
    python scripts/diagnostics.py --workdir=runs/sweeps/listops_cpu/learned/seed_0 \\
        --expression="[MAX 2 [MIN 4 7 ] 0 ]" --output_dir=runs/diagnostics

Every encoding is asked through the registry's own interface, so a new encoding needs no
change here. What a position gets:
  additive encodings: the row added to its embedding (`add_to_inputs` on zeros);
  rotary encodings: [cos, sin] of its rotation angles, whose dot products are the
    relative kernel a constant query and key see;
  bias encodings: no row; their bias over (query, key) positions is shown instead.
For a row representation, one PNG per encoding: the table, the position-by-position cosine
similarity, mean similarity against distance, row norms, singular values (numerical rank),
and the PoPE paper's high-dimension correlation: the fraction of trailing dimensions in
which every pair of positions correlates above 0.999, against sequence length.
With --workdir, trained encodings (learned, t5) come from the run's best checkpoint, at
the run's model shape, and --expression draws the attention weights of every layer and
head for that input, as the run's task reads it (a ListOps expression). summary.json holds the numbers
behind the plots.
"""
import argparse
import json
import os
from collections.abc import Sequence

from lra_posenc import encodings
from lra_posenc.data.files import written_whole
from lra_posenc.diagnostics import plot_bias, plot_rows, representation, row_diagnostics
from lra_posenc.tasks import CONFIG_HISTORIES, TASKS
from lra_posenc.training.checkpointing import restore_best
from lra_posenc.validation import comma_separated


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--encodings', default=','.join(encodings.REGISTRY), help='Comma-separated registry names.')
  parser.add_argument('--length', type=int, default=512)
  parser.add_argument('--dim', type=int, default=128)
  parser.add_argument('--num_heads', type=int, default=8)
  parser.add_argument('--lengths', default='16,32,64,128,256,512,1024,2048',
                      help='Lengths for the high-dimension correlation curve (those <= --length are used).')
  parser.add_argument('--workdir', help='A training workdir: its encoding, shape and trained parameters.')
  parser.add_argument('--expression', help="With --workdir: draw the run's attention maps for this input (a "
                      'ListOps run: an expression).')
  args = parser.parse_args(argv)
  if args.expression and not args.workdir:
    parser.error('--expression needs --workdir (a trained run)')
  os.makedirs(args.output_dir, exist_ok=True)
  try:
    lengths = comma_separated('--lengths', args.lengths, int, at_least=1)
  except ValueError as error:
    parser.error(str(error))
  summary = {}
  if args.workdir:
    config, params, _ = restore_best(args.workdir, CONFIG_HISTORIES)
    # The trained shape, [CLS] and all.
    model = TASKS[config.task].transformer_of(config)
    names, options = [model.pos_encoding], model.pos_encoding_options
    dim, num_heads, head_dim, length = model.emb_dim, model.num_heads, model.head_dim, model.max_len
    trained = params['encoder'].get('pos_encoding', params.get('pos_encoding'))
  else:
    names = args.encodings.split(',')
    unknown = [n for n in names if n not in encodings.REGISTRY]
    if unknown:
      parser.error(f'--encodings: {unknown} not in {list(encodings.REGISTRY)}')
    dim, num_heads, head_dim, length, trained = args.dim, args.num_heads, args.dim // args.num_heads, args.length, None
  for name in names:
    if not args.workdir:
      options = encodings.REGISTRY[name].Options()
    kind, values = representation(name, options, length=length, dim=dim, num_heads=num_heads, head_dim=head_dim,
                                  params=trained)
    title = f'{name} (length {length}, dim {dim}{", trained" if trained is not None else ""})'
    path = os.path.join(args.output_dir, f'{name}_L{length}_d{dim}.png')
    if kind == 'rows':
      stats, similarity = row_diagnostics(values, lengths)
      plot_rows(title, values, similarity, stats, path)
      summary[name] = {'representation': 'rows', 'plot': path} | stats
      print(f"{name}: rows {stats['shape']}, numerical rank {stats['numerical_rank']}, high-dimension fraction "
            f"{stats['high_dimension_fraction']}")
    elif kind == 'bias':
      plot_bias(title, values, path)
      summary[name] = {'representation': 'bias', 'plot': path, 'shape': list(values.shape)}
      print(f'{name}: attention bias {list(values.shape)}')
    elif kind == 'content':
      summary[name] = {'representation': 'content'}
      print(f'{name}: attention logits from queries and keys; --expression shows them in a trained run')
    else:
      summary[name] = {'representation': 'none'}
      print(f'{name}: gives positions nothing to plot')
  if args.expression:
    draw = TASKS[config.task].attention_maps
    if draw is None:
      parser.error(f'--expression: a {config.task} run has no attention maps to draw for an input')
    summary['attention'] = draw(args.workdir, args.expression,
                                os.path.join(args.output_dir, f'attention_{names[0]}.png'))
  with written_whole(os.path.join(args.output_dir, 'summary.json')) as f:
    json.dump(summary, f, indent=1)


if __name__ == '__main__':
  main()
