"""The one check every choice-valued setting goes through, so all such errors read alike."""
from collections.abc import Iterable


def check_choice(key: str, value: object, choices: Iterable) -> None:
  """Raises ValueError naming `key`, the bad value and the valid choices."""
  choices = list(choices)
  if value not in choices:
    raise ValueError(f'{key}={value!r} is not one of {choices}')
