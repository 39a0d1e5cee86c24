"""Fail-fast config validation, so a typo is an error before anything compiles."""
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import ml_collections

from lra_posenc import encodings

SettingsT = TypeVar('SettingsT')


# Keys that had two meanings, or one name with another key, and what replaced them.
RENAMED = {
    'data.max_eval_length': 'data.max_eval_source_length (evaluated sources are cut to it) and '
                            'decoding.max_output_length (the longest translation)',
    'data.generator.min_length': 'data.generator.longer_than (exclusive, as in LRA)',
    'data.generator.max_length': 'data.generator.shorter_than (exclusive, as in LRA; data.max_length is inclusive)',
}


def check_keys(section: ml_collections.ConfigDict, path: str, allowed: Iterable[str]) -> None:
  """Every key of `section` must be one the code reads, and every read key must be present."""
  allowed = list(allowed)
  for key in section.keys():
    if f'{path}.{key}' in RENAMED:
      raise ValueError(f'{path}.{key} was renamed; use {RENAMED[f"{path}.{key}"]}')
    if key not in allowed:
      raise ValueError(f'{path}.{key} is not a config key the code reads; valid keys of {path}: {allowed}')
  missing = [key for key in allowed if key not in section]
  if missing:
    raise ValueError(f'{path} lacks key(s) {missing}')


@dataclasses.dataclass(frozen=True)
class ConfigHistory:
  """How one task's config.json files written before its latest keys read today.

  Attributes:
    data_key: the task's own key of `config.data`, which says that the task wrote a config.json from before
      configs had `task` (every one committed under results/ up to 2026-11-28); None for a task younger.
    upgrade: sets, in such an old config (a dict), the task's keys added since, at the values that give the
      behaviour from before.
  """
  data_key: str | None = None
  upgrade: Callable[[dict], None] | None = None


def task_of(config: Mapping, histories: Mapping[str, ConfigHistory]) -> str:
  """The task whose program wrote `config`: its `task`, or in an older config.json the task of `histories` (task
  -> its history) whose data key its data section holds."""
  if 'task' in config:
    return config['task']
  keys = {task: history.data_key for task, history in histories.items() if history.data_key}
  for task, key in keys.items():
    if key in config['data']:
      return task
  marks = f'neither task nor any of {[f"data.{key}" for key in keys.values()]}' if keys else 'no task'
  raise ValueError(f'a config with {marks}: no task of {sorted(histories)} wrote it')


def upgrade_old_config(config: dict, histories: Mapping[str, ConfigHistory]) -> dict:
  """A config.json written before keys were added (a dict), with them, at the values that give the behaviour from
  before: `task`, optimizer.min_learning_rate (a cosine decayed to 0), unselected encodings' options at a former
  default (`encodings.upgrade_config`), and those its task's history adds.

  Only these: they are what config.json files committed under results/ lack (2026-12-02;
  tests/test_experiments.py reads every one).
  """
  config.setdefault('task', task_of(config, histories))
  config['optimizer'].setdefault('min_learning_rate', 0.0)
  encodings.upgrade_config(config['model'])
  history = histories.get(config['task'])
  if history is not None and history.upgrade is not None:
    history.upgrade(config)
  return config


def section_keys(settings: type) -> tuple[str, ...]:
  """The config keys of a section read into the dataclass `settings`: its fields, the schema written once."""
  return tuple(field.name for field in dataclasses.fields(settings))


def read_section(section: ml_collections.ConfigDict, path: str, settings: type[SettingsT]) -> SettingsT:
  """`section` (at `path`) as the dataclass `settings`, its keys checked against the fields first."""
  check_keys(section, path, section_keys(settings))
  return settings(**section.to_dict())
