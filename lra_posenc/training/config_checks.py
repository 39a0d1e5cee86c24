"""Fail-fast config validation, so a typo is an error before anything compiles."""
from collections.abc import Iterable, Mapping

import ml_collections


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


# Keys added later, with the value that gives the behaviour from before them.
ADDED_KEYS = {'model.attention_implementation': 'auto', 'model.remat': False, 'evaluation.selection_metric': 'accuracy',
              'training.patience': 0, 'evaluation.average_last': 0}
# Model keys added later, also missing from older checkpoints' records: each task's that its model has.
ADDED_MODEL_KEYS = ('norm_position', 'activation', 'activation_dropout_rate', 'embedding_scaling',
                    'randomized_positions')
TRANSLATION_ONLY_MODEL_KEYS, LISTOPS_ONLY_MODEL_KEYS = ('embedding_scaling',), ('randomized_positions',)


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
  """A config.json written before the keys in RENAMED were renamed and those in ADDED_KEYS (and `task`;
  ListOps' data.augment and model.length_multiple; translation's training.max_tokens, data.tokenizer.lowercase and
  loss.chunk_tokens) added, in today's keys.

  Workdirs trained before stay readable (translate, diagnostics). The beam-search batch
  was `evaluation.batch_size` then, and the output cap the source cut.
  """
  for key, value in ADDED_KEYS.items():
    section, name = key.split('.')
    config.get(section, {}).setdefault(name, value)
  config.setdefault('task', task_of(config))
  data = config['data']
  translation = config['task'] == 'translation'
  if 'model' in config:
    other_task = LISTOPS_ONLY_MODEL_KEYS if translation else TRANSLATION_ONLY_MODEL_KEYS
    config['model'] = upgrade_old_model(config['model'], [key for key in ADDED_MODEL_KEYS if key not in other_task])
  if translation:
    config['training'].setdefault('max_tokens', 0)
    config['loss'].setdefault('chunk_tokens', 0)  # Automatic: the chunk changes the speed, not the loss.
    data['tokenizer'].setdefault('lowercase', False)
  if 'max_eval_length' in data:
    length = data.pop('max_eval_length')
    data['max_eval_source_length'] = length
    config['decoding'].setdefault('max_output_length', length)
    config['decoding'].setdefault('batch_size', config['evaluation']['batch_size'])
  if not translation:
    data['generator'] = upgrade_generator_keys(data['generator'])
    data.setdefault('augment', {'shuffle_arguments': 0.0, 'contract_subtrees': 0.0})
    config.get('model', {}).setdefault('length_multiple', 1)  # Padding changes how attention computes, not what.
  return config


def upgrade_old_model(model: dict, keys: Iterable[str]) -> dict:
  """A `config.model` (or a checkpoint's record of it) from before the ADDED_MODEL_KEYS among `keys`,
  with them, at the values that give the behaviour from before them."""
  earlier = {'norm_position': 'pre', 'activation': 'gelu', 'embedding_scaling': 'none',
             'activation_dropout_rate': model.get('dropout_rate'), 'randomized_positions': 0}
  return {key: earlier[key] for key in keys if key in ADDED_MODEL_KEYS} | model


def upgrade_generator_keys(generator: dict) -> dict:
  """A ListOps generator spec (`data.generator`, or a workdir's data/generator.json) with its renamed keys."""
  renamed = {'min_length': 'longer_than', 'max_length': 'shorter_than'}
  return {renamed.get(key, key): value for key, value in generator.items()}
