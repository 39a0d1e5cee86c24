"""How the runs of a comparison are named and read, for the studies and for a task's own figures: a variant's
folder, the seed of a run folder, the name of a length bucket, and figures over seeds.

A variant is an encoding with optional config overrides, `legendre:grid=open:position_offset=1`
(a key without a dot is an option of that encoding) or `chebyshev:model.pos_encoding_placement=after_encoder`
(a dotted key is any config key); its runs live in OUTPUT_DIR/VARIANT_DIRECTORY/seed_S.
"""
import dataclasses
import os
import statistics
from collections.abc import Sequence

from lra_posenc import encodings

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
