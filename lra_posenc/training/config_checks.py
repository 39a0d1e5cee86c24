"""Fail-fast config validation, so a typo is an error before anything compiles."""
import dataclasses
from collections.abc import Iterable, Mapping
from typing import TypeVar

import ml_collections

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


# Each task's own key of `config.data`, in every config.json written so far: what says which task trained a run
# written before `config.task` was (every one committed under results/ up to 2026-11-28).
TASK_DATA_KEYS = {'listops': 'generator', 'translation': 'tokenizer'}


def task_of(config: Mapping) -> str:
  """The task whose program wrote `config`: its `task`, or in an older config.json its data section's own key."""
  if 'task' in config:
    return config['task']
  data = config['data']
  for task, key in TASK_DATA_KEYS.items():
    if key in data:
      return task
  raise ValueError(f'a config with none of {[f"data.{key}" for key in TASK_DATA_KEYS.values()]}: no task of '
                   f'this framework wrote it')


def upgrade_old_config(config: dict) -> dict:
  """A config.json written before six keys were added, with them, at the values that give the behaviour from
  before: `task`; optimizer.min_learning_rate (a cosine decayed to 0); ListOps' model.length_multiple;
  translation's loss.chunk_tokens and data.tokenizer.lowercase; model.embedding_scaling where model.init_std is.

  Only these: they are what config.json files committed under results/ lack (2026-12-02;
  tests/test_experiments.py reads every one).
  """
  config.setdefault('task', task_of(config))
  config['optimizer'].setdefault('min_learning_rate', 0.0)
  if config['task'] == 'translation':
    config['loss'].setdefault('chunk_tokens', 0)  # Automatic: the chunk changes the speed, not the loss.
    config['data']['tokenizer'].setdefault('lowercase', False)
  elif config['task'] == 'listops':
    config['model'].setdefault('length_multiple', 1)  # Padding changes how attention computes, not what.
  if 'init_std' in config['model']:  # GPT-2's parametrisation (the language model's) before it had a second.
    config['model'].setdefault('embedding_scaling', 'none')
  return config


def section_keys(settings: type) -> tuple[str, ...]:
  """The config keys of a section read into the dataclass `settings`: its fields, the schema written once."""
  return tuple(field.name for field in dataclasses.fields(settings))


def read_section(section: ml_collections.ConfigDict, path: str, settings: type[SettingsT]) -> SettingsT:
  """`section` (at `path`) as the dataclass `settings`, its keys checked against the fields first."""
  check_keys(section, path, section_keys(settings))
  return settings(**section.to_dict())
