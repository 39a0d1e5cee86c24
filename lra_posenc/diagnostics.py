"""What positional encodings give a position and how positions relate: tables, similarities, numerical rank,
the PoPE paper's high-dimension correlation, biases, and a trained run's attention maps as its task draws
them (`TaskSpec.attention_maps`; `scripts/diagnostics.py` draws them all)."""
from collections.abc import Sequence

import matplotlib
import numpy as np

matplotlib.use('Agg')  # Files only; no display.
import matplotlib.pyplot as plt  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from lra_posenc import encodings  # noqa: E402

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


def plot_attention_maps(layers: Sequence[np.ndarray], labels: Sequence[str], title: str, path: str) -> None:
  """Every layer's and head's attention weights ([heads, queries, keys] per layer) in one figure, on one colour
  scale, with the input's tokens as tick labels where there are at most 40."""
  heads = layers[0].shape[0]
  figure, axes = plt.subplots(len(layers), heads, figsize=(3 * heads + 1, 3 * len(layers) + 0.6), squeeze=False,
                              layout='constrained')
  largest = max(float(weights.max()) for weights in layers)
  for layer, weights in enumerate(layers):
    for head in range(heads):
      ax = axes[layer, head]
      image = ax.imshow(weights[head], cmap='viridis', vmin=0, vmax=largest, interpolation='nearest')
      ax.set_title(f'layer {layer} head {head}', fontsize='small')
      if len(labels) <= 40:
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=5)
        ax.set_yticks(range(len(labels)), labels, fontsize=5)
  figure.colorbar(image, ax=axes, shrink=0.8, label='attention weight')
  figure.suptitle(f'{title}\n(rows: queries, columns: keys)')
  figure.savefig(path, dpi=100)
  plt.close(figure)
