"""A ListOps config, read and checked once at the task's boundary, into frozen settings.

Every check raises ValueError naming the bad key before any data is made or read; what runs after
receives these settings, not the ConfigDict.
"""
import dataclasses

import ml_collections

from lra_posenc import encodings
from lra_posenc.data import listops as generator
from lra_posenc.listops import augment, input_pipeline
from lra_posenc.models.classifier import PLACEMENTS, POOLINGS, TransformerClassifier
from lra_posenc.models.transformer import (CONFIG_KEYS, IF_SET_CONFIG_KEYS, TransformerConfig, config_keys,
                                          transformer_config)
from lra_posenc.training.settings import ConfigHistory, TrainerSettings, check_keys, read_trainer_settings, section_keys
from lra_posenc.validation import check_positive, check_section_choice

TASK = 'listops'


def _upgrade_old_config(config: dict) -> None:
  """The ListOps key added since its first config.json files: model.length_multiple (1: no padding, which changes
  how attention computes, not what)."""
  config['model'].setdefault('length_multiple', 1)


# How this task's older config.json files read today (`training.settings.ConfigHistory`, by task: this one), for
# `checkpointing.read_config`: the generator's section named the task before configs had `task`.
CONFIG_HISTORY = {TASK: ConfigHistory(data_key='generator', upgrade=_upgrade_old_config)}

GENERATOR_KEYS = ('seed', 'num_train_samples', 'num_valid_samples', 'num_test_samples') + tuple(
    f.name for f in dataclasses.fields(generator.GeneratorOptions))
OWN_MODEL_KEYS = config_keys(TransformerClassifier)  # The classifier's keys beside the Transformer stack's.
MODEL_KEYS = CONFIG_KEYS + OWN_MODEL_KEYS
SELECTION_METRICS = ('accuracy',)


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """`config.data`, checked: where the files are (empty: generated into WORKDIR/data from `generator`, a
  `data.listops.write_unless_present` spec), the longest input kept, the classes, what an invalid row does
  (input_pipeline.INVALID_ROW_POLICIES) and the training batches' augmentation."""
  data_dir: str
  max_length: int
  num_classes: int
  on_invalid: str
  generator: dict
  augment: augment.AugmentSettings


DATA_KEYS = section_keys(DataSettings)


@dataclasses.dataclass(frozen=True)
class ListOpsSettings:
  """A ListOps config, read and checked once: the trainer's sections, the data, and the model."""
  trainer: TrainerSettings
  data: DataSettings
  model: TransformerClassifier


@dataclasses.dataclass(frozen=True)
class ScoringSettings:
  """What scoring a trained run's checkpoint reads of its config: the data, the model and the evaluation batch
  size (one device scores, so nothing depends on this host's devices)."""
  data: DataSettings
  model: TransformerClassifier
  batch_size: int


def read_settings(config: ml_collections.ConfigDict) -> ListOpsSettings:
  """Checks every section before any data is made or read; raises ValueError naming the bad key."""
  trainer = read_trainer_settings(config, 'listops')
  check_section_choice(config.evaluation, 'evaluation', 'selection_metric', SELECTION_METRICS)
  data = read_data(config.data)
  return ListOpsSettings(trainer=trainer, data=data, model=read_model(config.model, data))


def read_data(data: ml_collections.ConfigDict) -> DataSettings:
  check_keys(data, 'data', DATA_KEYS)
  check_keys(data.generator, 'data.generator', GENERATOR_KEYS)
  check_keys(data.augment, 'data.augment', augment.KEYS)
  check_positive(data, 'data', 'max_length', 'num_classes')
  check_section_choice(data, 'data', 'on_invalid', input_pipeline.INVALID_ROW_POLICIES)
  try:
    options = generator.GeneratorOptions.from_spec(data.generator)
  except ValueError as error:
    raise ValueError(f'data.generator: {error}') from None
  if not data.data_dir and options.label_modulus > data.num_classes:
    raise ValueError(f'data.generator.label_modulus={options.label_modulus} writes labels '
                     f'0..{options.label_modulus - 1}, more than data.num_classes={data.num_classes}')
  return DataSettings(**data.to_dict() | {'augment': augment.AugmentSettings(**data.augment.to_dict())})


def read_model(model: ml_collections.ConfigDict, data: DataSettings) -> TransformerClassifier:
  """The classifier `config.model` describes for `data`'s inputs."""
  check_keys(model, 'model', MODEL_KEYS, optional=IF_SET_CONFIG_KEYS)
  check_positive(model, 'model', 'classifier_dim', 'length_multiple')
  check_section_choice(model, 'model', 'pooling', POOLINGS)
  check_section_choice(model, 'model', 'pos_encoding_placement', PLACEMENTS)
  positions = data.max_length + (model.pooling == 'cls')
  if model.randomized_positions and model.randomized_positions < positions:
    raise ValueError(f'model.randomized_positions={model.randomized_positions} must be 0 (off) or at least the '
                     f'{positions} positions of an input (data.max_length {data.max_length}'
                     f'{" and the CLS token" if model.pooling == "cls" else ""})')
  transformer = transformer_config(model, max_len=max(positions, model.randomized_positions))
  if model.pos_encoding_placement != 'input' and encodings.acts_in_attention(model.pos_encoding):
    additive = [name for name in encodings.REGISTRY if not encodings.acts_in_attention(name)]
    raise ValueError(f'model.pos_encoding_placement={model.pos_encoding_placement!r} needs an additive encoding '
                     f'({additive}); model.pos_encoding={model.pos_encoding!r} acts inside attention')
  return TransformerClassifier(transformer, vocab_size=len(input_pipeline.VOCAB), num_classes=data.num_classes,
                               **{key: model[key] for key in OWN_MODEL_KEYS})


def read_scoring_settings(config: ml_collections.ConfigDict) -> ScoringSettings:
  """A trained run's config (its config.json) as scoring its checkpoints reads it, those sections checked."""
  data = read_data(config.data)
  check_positive(config.evaluation, 'evaluation', 'batch_size')
  return ScoringSettings(data=data, model=read_model(config.model, data), batch_size=config.evaluation.batch_size)


def create_model(config: ml_collections.ConfigDict) -> TransformerClassifier:
  """The classifier a ListOps config describes (a trained run's config.json, say), its data and model checked."""
  return read_model(config.model, read_data(config.data))


def transformer_of(config: ml_collections.ConfigDict) -> TransformerConfig:
  """The Transformer stack a ListOps config describes, at the positions it trains ([CLS] and randomized
  positions included)."""
  return create_model(config).config
