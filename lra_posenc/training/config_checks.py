"""Fail-fast config validation, so a typo is an error before anything compiles."""
from collections.abc import Iterable

import ml_collections

from lra_posenc.validation import check_choice


def check_keys(section: ml_collections.ConfigDict, path: str, allowed: Iterable[str]) -> None:
  """Every key of `section` must be one the code reads, and every read key must be present."""
  allowed = list(allowed)
  for key in section.keys():
    if key not in allowed:
      raise ValueError(f'{path}.{key} is not a config key the code reads; valid keys of {path}: {allowed}')
  missing = [key for key in allowed if key not in section]
  if missing:
    raise ValueError(f'{path} lacks key(s) {missing}')


def check_positive(section: ml_collections.ConfigDict, path: str, *keys: str) -> None:
  for key in keys:
    if not section[key] > 0:
      raise ValueError(f'{path}.{key} must be positive, got {section[key]!r}')


def check_section_choice(section: ml_collections.ConfigDict, path: str, key: str, choices: Iterable[str]) -> None:
  check_choice(f'{path}.{key}', section[key], choices)
