"""What the comparison scripts share: variant names and their directories, statistics over seeds, length
tables and their merging, and the plots' finish.

A variant is an encoding with optional config overrides, `legendre:grid=open:position_offset=1`
(a key without a dot is an option of that encoding) or `chebyshev:model.pos_encoding_placement=after_encoder`
(a dotted key is any config key); its runs live in OUTPUT_DIR/VARIANT_DIRECTORY/seed_S.
"""
import dataclasses
import os
import statistics
from collections.abc import Sequence

import matplotlib

matplotlib.use('Agg')  # Files only; no display.
import matplotlib.pyplot as plt  # noqa: E402

from lra_posenc import encodings  # noqa: E402

# A length-table cell whose encoding has no value past its training length (a learned table).
CANNOT_EXTRAPOLATE = 'cannot extrapolate'


def bucket_label(low: int, high: int) -> str:
  """The name of the length bucket [low, high)."""
  return f'{low}-{high - 1}'


@dataclasses.dataclass(frozen=True)
class Variant:
  """An encoding and the config overrides that distinguish this row of the table."""
  spec: str
  encoding: str
  overrides: tuple[tuple[str, str], ...]

  @property
  def directory(self) -> str:
    """The run folder's name: NAME__KEY-VALUE..., the first '=' of each override a '-'."""
    name, *pairs = self.spec.split(':')
    return '__'.join([name] + [pair.replace('=', '-', 1) for pair in pairs])


def spec_of_directory(directory: str) -> str:
  """Inverts `Variant.directory` (keys hold no '-', so the first '-' of each override separates its value)."""
  name, *pairs = directory.split('__')
  return ':'.join([name] + [pair.replace('-', '=', 1) for pair in pairs])


def seed_of_run(run_dir: str) -> int:
  """The seed a sweep's run folder, VARIANT/seed_S, names; a ValueError for a folder named otherwise."""
  seed = os.path.basename(run_dir).removeprefix('seed_')
  if not seed.isdigit():
    raise ValueError(f'{run_dir}: a run folder is named seed_S, S a whole number')
  return int(seed)


def parse_override(text: str) -> tuple[str, str]:
  """`KEY=VALUE` as (key, value); raises ValueError for anything else."""
  key, separator, value = text.partition('=')
  if not separator or not key:
    raise ValueError(f'{text!r} is not KEY=VALUE')
  return key, value


def parse_variant(spec: str) -> Variant:
  """`NAME[:KEY=VALUE]...`; raises ValueError naming a bad encoding or override."""
  if '/' in spec or '__' in spec:
    raise ValueError(f"variant {spec!r}: '/' and '__' cannot be in a run folder's name")
  name, *pairs = spec.split(':')
  if name not in encodings.REGISTRY:
    raise ValueError(f'variant {spec!r}: encoding {name!r} is not one of {list(encodings.REGISTRY)}')
  overrides = [('model.pos_encoding', name)]
  for pair in pairs:
    try:
      key, value = parse_override(pair)
    except ValueError as error:
      raise ValueError(f'variant {spec!r}: {error}') from None
    if '-' in key:
      raise ValueError(f"variant {spec!r}: key {key!r} has a '-', which config keys never do")
    overrides.append((key if '.' in key else f'{encodings.OPTIONS_KEY}.{name}.{key}', value))
  return Variant(spec, name, tuple(overrides))


def mean_and_std(values: Sequence[float | None]) -> dict:
  """Count, mean and sample std (ddof=1) of the values present (None: a run without this figure); the mean
  is None without values, the std with fewer than two."""
  present = [v for v in values if v is not None]
  return {'count': len(present), 'mean': statistics.fmean(present) if present else None,
          'std': statistics.stdev(present) if len(present) > 1 else None}


def mean_std_cell(stats: dict, digits: int) -> str:
  """A table cell 'mean ± std' (the mean alone where there is no std) with `digits` decimal places."""
  return f"{stats['mean']:.{digits}f}" + (f" ± {stats['std']:.{digits}f}" if stats['std'] is not None else '')


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


def length_table(summary: dict, buckets: Sequence[str], baseline: dict[str, float] | None, digits: int) -> str:
  """Markdown: a row per variant of mean ± std by length (or depth) bucket, the majority class and the examples
  per bucket; a variant whose encoding has no value past its training length reads CANNOT_EXTRAPOLATE."""
  lines = ['| variant | ' + ' | '.join(buckets) + ' |', '| --- ' * (len(buckets) + 1) + '|']
  for variant, cells in summary.items():
    row = []
    for bucket in buckets:
      cell = cells.get(bucket)
      if cell is None:
        row.append('')
      elif cell['mean'] is None:
        row.append(CANNOT_EXTRAPOLATE)
      else:
        row.append(mean_std_cell(cell, digits) + (f" (n={len(cell['values'])})" if len(cell['values']) > 1 else ''))
    lines.append(f'| {variant} | ' + ' | '.join(row) + ' |')
  if baseline:
    lines.append('| majority class | ' + ' | '.join(f'{baseline[b]:.{digits}f}' for b in buckets) + ' |')
  # Each bucket's count from the first row that has it (merged tables hold rows without some buckets).
  examples = {b: cells[b]['examples'] for cells in reversed(summary.values()) for b in cells}
  lines.append('| examples | ' + ' | '.join(str(examples.get(b, '')) for b in buckets) + ' |')
  return '\n'.join(lines) + '\n'


def merge_length_summaries(summaries: dict[str, dict], variants: Sequence[str] | None = None) -> dict:
  """Length (or depth) summaries, by name, as one, each cell from the first that scores it: buckets, variants,
  majority_class, and sources (variant -> names); refuses summaries whose majority classes differ in a bucket."""
  buckets, rows, majority, sources = [], {}, {}, {}
  for name, summary in summaries.items():
    for bucket in summary['buckets']:
      if bucket not in buckets:
        buckets.append(bucket)
      share = (summary.get('majority_class') or {}).get(bucket)
      if share is not None and majority.setdefault(bucket, share) != share:
        raise ValueError(f'{name}: bucket {bucket!r} has majority class {share}, an earlier summary '
                         f'{majority[bucket]}: not the same evaluation set')
    for variant, cells in summary['variants'].items():
      row = rows.setdefault(variant, {})
      for bucket, cell in cells.items():
        if bucket not in row:
          row[bucket] = cell
          if name not in sources.setdefault(variant, []):
            sources[variant].append(name)
  if variants is not None:
    missing = [v for v in variants if v not in rows]
    if missing:
      raise ValueError(f'no summary scores {missing}; the variants there: {sorted(rows)}')
    rows = {v: rows[v] for v in variants}
  return {'buckets': buckets, 'variants': rows, 'majority_class': majority,
          'sources': {v: sources[v] for v in rows}}
