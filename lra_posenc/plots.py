"""The figures' common parts, for the studies and for a task's own plots: axes for one line per variant, the
finish of a line plot, and a model's attention maps. Files only; no display."""
from collections.abc import Sequence

import matplotlib
import numpy as np

matplotlib.use('Agg')  # Files only; no display.
import matplotlib.pyplot as plt  # noqa: E402


def comparison_figure(num_variants: int) -> tuple[plt.Figure, plt.Axes]:
  """A figure and axes for one line per variant, each variant its own colour (tab10, or tab20 past ten)."""
  figure, axes = plt.subplots(figsize=(10, 5))
  axes.set_prop_cycle(color=plt.get_cmap('tab10' if num_variants <= 10 else 'tab20').colors)
  return figure, axes


def save_line_plot(figure: plt.Figure, axes: plt.Axes, path: str, *, legend_title: str | None = None) -> None:
  """The comparison plots' common finish: grid, the legend beside the axes (never over data), PNG, figure closed."""
  axes.grid(alpha=0.3)
  axes.title.set_wrap(True)  # A long title over axes narrowed by the legend would run off the figure's left edge.
  axes.legend(fontsize='small', title=legend_title, title_fontsize='small', loc='upper left',
              bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
  figure.tight_layout()
  figure.tight_layout()  # Again: the wrapped title's height is known only once the legend has narrowed the axes.
  figure.savefig(path, dpi=120)
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
