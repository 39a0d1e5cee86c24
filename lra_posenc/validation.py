"""The checks every choice- or range-valued setting goes through, so all such errors read alike."""
import math
from collections.abc import Callable, Iterable

import ml_collections


def check_choice(key: str, value: object, choices: Iterable) -> None:
  """Raises ValueError naming `key`, the bad value and the valid choices."""
  choices = list(choices)
  if value not in choices:
    raise ValueError(f'{key}={value!r} is not one of {choices}')


def check_range(key: str, value: float, *, above: float | None = None, at_least: float | None = None,
                below: float | None = None, at_most: float | None = None, why: str = '') -> None:
  """Raises ValueError naming `key`, the bad value and the range (`above` < value, `at_least` <= value,
  value < `below`, value <= `at_most`)."""
  bounds = ([f'> {above}'] if above is not None else []) + ([f'>= {at_least}'] if at_least is not None else []) + (
      [f'< {below}'] if below is not None else []) + ([f'<= {at_most}'] if at_most is not None else [])
  if ((above is not None and not value > above) or (at_least is not None and not value >= at_least)
      or (below is not None and not value < below) or (at_most is not None and not value <= at_most)):
    raise ValueError(f'{key}={value!r} must be {" and ".join(bounds)}' + (f' ({why})' if why else ''))


def check_positive(section: ml_collections.ConfigDict, path: str, *keys: str) -> None:
  """Each of `keys` of the config section at `path` must be > 0."""
  for key in keys:
    check_range(f'{path}.{key}', section[key], above=0)


def check_section_choice(section: ml_collections.ConfigDict, path: str, key: str, choices: Iterable[str]) -> None:
  """The config section's `key` must be one of `choices`."""
  check_choice(f'{path}.{key}', section[key], choices)


def comma_separated(flag: str, text: str, kind: Callable[[str], float], *, at_least: float | None = None
                    ) -> list[float]:
  """`text`, the value of `flag`, as 'A,B,...' of `kind` (int or float), each at least `at_least`; raises
  ValueError naming the flag and the bad item."""
  values = []
  for item in text.split(','):
    try:
      values.append(kind(item))
    except ValueError:
      values.append(math.nan)
    if math.isnan(values[-1]):
      raise ValueError(f'{flag}={text}: {item!r} is not {"an integer" if kind is int else "a number"}')
    if at_least is not None and values[-1] < at_least:
      raise ValueError(f'{flag}={text}: {item} is below {at_least:g}')
  return values
