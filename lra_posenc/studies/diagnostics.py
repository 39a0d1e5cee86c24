"""Looks inside positional encodings: what each one gives a position, and how positions relate.

    python -m lra_posenc.studies.diagnostics --encodings=sinusoidal,chebyshev,legendre,rope --length=512 --dim=128 \\
        --output_dir=runs/diagnostics
    python -m lra_posenc.studies.diagnostics --workdir=runs/sweeps/listops_cpu/learned/seed_0 \\
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

import matplotlib
import numpy as np

matplotlib.use('Agg')  # Files only; no display.
import matplotlib.pyplot as plt  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from lra_posenc import encodings, tasks  # noqa: E402
from lra_posenc.data.files import written_whole  # noqa: E402
from lra_posenc.tasks import CONFIG_HISTORIES  # noqa: E402
from lra_posenc.training.checkpointing import restore_best
from lra_posenc.validation import comma_separated  # noqa: E402

CORRELATION_THRESHOLD = 0.999


def representation(name: str, options: object, *, length: int, dim: int, num_heads: int, head_dim: int,
                   params: dict | None) -> tuple[str, np.ndarray | None]:
  """('rows', [length, width]) or ('bias', [heads, length, length]) or ('content', None) (logits that read
  the queries and keys: only attention maps show them) or ('none', None) for `name`."""
  module = encodings.create(name, options, max_len=length, dim=dim, num_heads=num_heads, head_dim=head_dim)
  positions = jnp.arange(length, dtype=jnp.int32)[None]
  zeros = jnp.zeros((1, length, dim), jnp.float32)
  if params is None:  # Fresh parameters of both methods (learned tables, t5 biases at their init).
    inputs_params = module.init(jax.random.PRNGKey(0), zeros, positions, method=module.add_to_inputs)
    attention_params = module.init(jax.random.PRNGKey(0), positions, positions, causal=False,
                                   method=module.attention_terms)
    params = {**inputs_params.get('params', {}), **attention_params.get('params', {})}
  variables = {'params': params}
  rows = np.asarray(module.apply(variables, zeros, positions, method=module.add_to_inputs))[0]
  if np.any(rows):
    return 'rows', rows
  terms = module.apply(variables, positions, positions, causal=False, method=module.attention_terms)
  if terms.query_rotary is not None:
    rotary = terms.query_rotary
    return 'rows', np.concatenate([np.asarray(rotary.cos)[0, :, 0], np.asarray(rotary.sin)[0, :, 0]], axis=-1)
  if terms.bias is not None:
    return 'bias', np.asarray(jnp.broadcast_to(terms.bias, (1, num_heads, length, length)))[0]
  if terms.content is not None:
    return 'content', None
  return 'none', None


def cosine_similarity(rows: np.ndarray) -> np.ndarray:
  unit = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
  return unit @ unit.T


def mean_by_distance(matrix: np.ndarray) -> np.ndarray:
  """Mean of matrix[p, q] over pairs with q - p = distance, for distance 0..length-1."""
  return np.array([np.diagonal(matrix, offset).mean() for offset in range(matrix.shape[0])])


def high_dimension_fraction(rows: np.ndarray, threshold: float = CORRELATION_THRESHOLD) -> float:
  """The largest fraction of trailing dimensions in which all position pairs correlate above `threshold`.

  Blocks are tried from the last two dimensions outwards in steps of width/64 (at least 1), ending with
  all of them; a block in which some row is constant stops the search, since its correlation is undefined.
  """
  width = rows.shape[1]
  step = max(1, width // 64)
  best = 0
  for start in range((width - 2) // step * step, -1, -step):
    block = rows[:, start:].astype(np.float64)
    centred = block - block.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(centred, axis=1)
    if np.any(norms < 1e-12):  # A row constant over these dimensions: correlation undefined, stop here.
      break
    unit = centred / norms[:, None]
    if (unit @ unit.T).min() <= threshold:
      break
    best = width - start
  return best / width


def row_diagnostics(rows: np.ndarray, lengths: Sequence[int]) -> tuple[dict, np.ndarray]:
  """The rows' figures (shape, norms, numerical rank, the high-dimension fraction per length) and their
  position-by-position cosine similarity."""
  singular_values = np.linalg.svd(rows.astype(np.float64), compute_uv=False)
  # Rank at the precision the model sees the table in (float32), with numpy's default rule.
  tolerance = singular_values.max() * max(rows.shape) * np.finfo(np.float32).eps
  similarity = cosine_similarity(rows)
  return {
      'shape': list(rows.shape),
      'numerical_rank': int((singular_values > tolerance).sum()),
      'singular_values': singular_values.tolist(),
      'row_norms': np.linalg.norm(rows, axis=1).tolist(),
      'similarity_by_distance': mean_by_distance(similarity).tolist(),
      'high_dimension_fraction': {int(n): high_dimension_fraction(rows[:n]) for n in lengths if n <= len(rows)},
  }, similarity


def plot_rows(title: str, rows: np.ndarray, similarity: np.ndarray, stats: dict, path: str) -> None:
  figure, axes = plt.subplots(2, 3, figsize=(15, 9))
  image = axes[0, 0].imshow(rows.T, aspect='auto', cmap='RdBu_r', interpolation='nearest')
  figure.colorbar(image, ax=axes[0, 0])
  axes[0, 0].set(title='table (dimension x position)', xlabel='position', ylabel='dimension')
  image = axes[0, 1].imshow(similarity, cmap='viridis', vmin=-1, vmax=1, interpolation='nearest')
  figure.colorbar(image, ax=axes[0, 1])
  axes[0, 1].set(title='cosine similarity', xlabel='position', ylabel='position')
  by_distance = np.asarray(stats['similarity_by_distance'])
  distances = np.arange(len(by_distance))
  # Even and odd distances apart: where they differ (legendre: 0 at every odd distance) one line would zigzag.
  axes[0, 2].plot(distances[0::2], by_distance[0::2], label='even distances')
  axes[0, 2].plot(distances[1::2], by_distance[1::2], label='odd distances')
  axes[0, 2].legend(fontsize='small')
  axes[0, 2].set(title='mean cosine similarity by distance', xlabel='distance', ylabel='similarity')
  axes[1, 0].plot(stats['row_norms'])
  axes[1, 0].set(title='row norm', xlabel='position', ylabel='L2 norm', ylim=(0, 1.05 * max(stats['row_norms'])))
  axes[1, 1].semilogy(np.maximum(stats['singular_values'], 1e-30))
  axes[1, 1].set(title=f"singular values (float32 numerical rank {stats['numerical_rank']} of {min(rows.shape)})",
                 xlabel='index')
  fractions = stats['high_dimension_fraction']
  axes[1, 2].plot(list(fractions), list(fractions.values()), marker='o')
  axes[1, 2].set(title=f'trailing dims with all pairs correlated > {CORRELATION_THRESHOLD}', xlabel='length',
                 ylabel='fraction of dimensions', xscale='log', ylim=(-0.02, 1.02))
  axes[1, 2].set_xticks(list(fractions), [str(n) for n in fractions])
  for ax in axes.flat:
    ax.grid(alpha=0.3)
  figure.suptitle(title)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def plot_bias(title: str, bias: np.ndarray, path: str) -> None:
  figure, axes = plt.subplots(1, 2, figsize=(12, 5))
  image = axes[0].imshow(bias.mean(0), cmap='viridis', interpolation='nearest')
  figure.colorbar(image, ax=axes[0])
  axes[0].set(title='attention bias, mean over heads', xlabel='key position', ylabel='query position')
  for head, matrix in enumerate(bias):
    axes[1].plot(np.arange(-len(matrix) + 1, len(matrix)),
                 [np.diagonal(matrix, offset).mean() for offset in range(-len(matrix) + 1, len(matrix))],
                 label=f'head {head}')
  axes[1].set(title='bias by key - query offset', xlabel='key - query', ylabel='bias')
  axes[1].grid(alpha=0.3)
  axes[1].legend(fontsize='x-small', ncol=2)
  figure.suptitle(title)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


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
    model = tasks.find(config.task).needs('transformer_of', 'drawing its encodings')(config)
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
    draw = tasks.find(config.task).attention_maps
    if draw is None:
      parser.error(f'--expression: a {config.task} run has no attention maps to draw for an input')
    summary['attention'] = draw(args.workdir, args.expression,
                                os.path.join(args.output_dir, f'attention_{names[0]}.png'))
  with written_whole(os.path.join(args.output_dir, 'summary.json')) as f:
    json.dump(summary, f, indent=1)


if __name__ == '__main__':
  main()
