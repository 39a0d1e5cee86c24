"""A language-modelling config, read and checked once at the task's boundary, into frozen settings.

Every check raises ValueError naming the bad key before any text is read; what runs after receives these
settings, not the ConfigDict. The data section's keys are `DataSettings`' fields.
"""
import dataclasses

import ml_collections

from lra_posenc import encodings
from lra_posenc.lm.input_pipeline import LEVELS
from lra_posenc.lm.passkey import Passkey
from lra_posenc.models.language_model import LanguageModel
from lra_posenc.models.seq2seq import EMBEDDING_SCALINGS
from lra_posenc.models.transformer import (CONFIG_KEYS, IF_SET_CONFIG_KEYS, OPTIONAL_CONFIG_KEYS, TransformerConfig,
                                          config_keys, transformer_config)
from lra_posenc.training.settings import ConfigHistory, TrainerSettings, check_keys, read_section, read_trainer_settings
from lra_posenc.validation import check_choice, check_range

TASK = 'lm'


# The passkey keys' values in config.json files from before them (with passkey_fraction 0, unused): those of
# configs/lm/shakespeare_char.py when they came.
PASSKEY_DEFAULTS = {'passkey_length': 4, 'passkey_depths': 8, 'passkey_trials': 16}


def _upgrade_old_config(config: dict) -> None:
  """The keys added since the language model's first config.json files: model.embedding_scaling ('none', GPT-2's
  parametrisation, the only one before); scoring.positions and scoring.position_draws ('sequential' with one
  pass: randomized positions were read at 0 ... length - 1 before); data.passkey_fraction (0: no passkeys) and
  the passkey keys beside it, at their defaults, which act only with passkeys."""
  config['model'].setdefault('embedding_scaling', 'none')
  config['scoring'].setdefault('positions', 'sequential')
  config['scoring'].setdefault('position_draws', 1)
  config['data'].setdefault('passkey_fraction', 0.0)
  config['data'].setdefault('passkey_length', PASSKEY_DEFAULTS['passkey_length'])
  for key in ('passkey_depths', 'passkey_trials'):
    config['scoring'].setdefault(key, PASSKEY_DEFAULTS[key])


# How this task's older config.json files read today (`training.settings.ConfigHistory`, by task: this one), for
# `checkpointing.read_config`; every one has `task`.
CONFIG_HISTORY = {TASK: ConfigHistory(upgrade=_upgrade_old_config)}
# The model's keys: the Transformer stack's with GPT-2's biases and initialisation (models.transformer), and the
# language model's own (randomized positions, the embeddings' parametrisation).
OWN_MODEL_KEYS = config_keys(LanguageModel)
MODEL_KEYS = CONFIG_KEYS + OPTIONAL_CONFIG_KEYS + OWN_MODEL_KEYS
# What picks the best checkpoint (higher is better): the validation split's mean log-probability of a token
# (nats; minus the loss), or its next-token accuracy.
SELECTION_METRICS = ('log_likelihood', 'accuracy')
TASK_SECTIONS = ('scoring',)
# How a model trained on randomized positions is read when scored (`ScoringSettings.positions`).
SCORING_POSITIONS = ('drawn', 'sequential')


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """`config.data`: one text file cut into training and validation as nanoGPT cuts it (the last
  `validation_fraction` validates), or a directory of train.txt, valid.txt and test.txt (`data_dir`); tokens of
  characters or bytes (`level`, one of input_pipeline.LEVELS); the training window (`block_size`); the fraction of
  training windows that carry a passkey of `passkey_length` symbols (lm/passkey.py; 0: none, and none scored)."""
  text_file: str
  data_dir: str
  level: str
  block_size: int
  validation_fraction: float
  passkey_fraction: float
  passkey_length: int

  def __post_init__(self):
    if bool(self.text_file) == bool(self.data_dir):
      raise ValueError('set exactly one of data.text_file (one file, cut into training and validation) and '
                       f'data.data_dir (train.txt, valid.txt, test.txt); got {self.text_file!r} and {self.data_dir!r}')
    check_choice('data.level', self.level, LEVELS)
    check_range('data.block_size', self.block_size, at_least=1)
    check_range('data.validation_fraction', self.validation_fraction, above=0, below=1)
    check_range('data.passkey_fraction', self.passkey_fraction, at_least=0, at_most=1,
                why='of the training windows, each carrying a passkey')
    check_range('data.passkey_length', self.passkey_length, at_least=1, why="a key's symbols")
    if self.passkey_fraction and self.passkey(0).last_start(self.block_size + 1) < 0:
      raise ValueError(f'data.passkey_length={self.passkey_length}: a needle and a query of a marker and the key '
                       f'({2 * (1 + self.passkey_length)} tokens) do not fit in a training window and its next token '
                       f'(data.block_size={self.block_size} + 1)')

  def passkey(self, vocabulary_size: int) -> Passkey | None:
    """The passkeys training windows carry, with ids after a vocabulary of `vocabulary_size`; None without."""
    return Passkey(vocabulary_size, self.passkey_length) if self.passkey_fraction else None

  def model_vocab_size(self, vocabulary_size: int) -> int:
    """The model's ids: the vocabulary's and the passkeys'."""
    passkey = self.passkey(vocabulary_size)
    return vocabulary_size + (passkey.num_ids if passkey else 0)

  @property
  def test_splits(self) -> tuple[str, ...]:
    """The splits the best checkpoint is scored on, the headline first: a directory's test and validation
    splits, or one file's validation part."""
    return ('validation',) if self.text_file else ('test', 'validation')


@dataclasses.dataclass(frozen=True)
class ScoringSettings:
  """`config.scoring`: how the best checkpoint is scored on the test splits beside the trainer's scores. Windows of
  `data.block_size` times each of `length_multiples` tokens; `sliding_stride` > 0 slides them by that many tokens,
  each scoring only its last `sliding_stride` targets (0: non-overlapping windows); `stretch_options` name encoding
  options that are also scored set to the length's ratio to the training window, for encodings that have them
  (RoPE's position interpolation and NTK-aware scaling, applied zero-shot). A model trained on randomized positions
  is read, with `positions` 'drawn', as Ruoss et al.'s code reads it: at sorted positions drawn as in training, the
  loss averaged over `position_draws` draws, and also at 0 ... length - 1; with 'sequential' only at 0 ... length - 1.
  A model trained with passkeys is also scored on them at every length: `passkey_trials` windows at each of
  `passkey_depths` depths."""
  length_multiples: tuple[int, ...]
  sliding_stride: int
  stretch_options: tuple[str, ...]
  positions: str
  position_draws: int
  passkey_depths: int
  passkey_trials: int

  def __post_init__(self):
    object.__setattr__(self, 'length_multiples', tuple(self.length_multiples))
    object.__setattr__(self, 'stretch_options', tuple(self.stretch_options))
    if not self.length_multiples or any(not isinstance(m, int) or m < 1 for m in self.length_multiples):
      raise ValueError(f'scoring.length_multiples={self.length_multiples} must be whole numbers >= 1')
    check_range('scoring.sliding_stride', self.sliding_stride, at_least=0)
    options = {f.name for cls in encodings.REGISTRY.values() for f in dataclasses.fields(cls.Options)}
    for option in self.stretch_options:
      check_choice('scoring.stretch_options', option, sorted(options))
    check_choice('scoring.positions', self.positions, SCORING_POSITIONS)
    check_range('scoring.position_draws', self.position_draws, at_least=1,
                why='passes over the split at drawn positions, averaged')
    check_range('scoring.passkey_depths', self.passkey_depths, at_least=1)
    check_range('scoring.passkey_trials', self.passkey_trials, at_least=1, why='windows at each depth')


@dataclasses.dataclass(frozen=True)
class LanguageModelSettings:
  """A language-modelling config: the trainer's sections, the data, the model and its scoring."""
  trainer: TrainerSettings
  data: DataSettings
  model: LanguageModel
  scoring: ScoringSettings


def read_settings(config: ml_collections.ConfigDict) -> LanguageModelSettings:
  """Checks every section before any text is read; raises ValueError naming the bad key."""
  trainer = read_trainer_settings(config, TASK, TASK_SECTIONS)
  check_choice('evaluation.selection_metric', config.evaluation.selection_metric, SELECTION_METRICS)
  data = read_data(config.data)
  return LanguageModelSettings(trainer=trainer, data=data, model=read_model(config.model, data, vocab_size=1),
                               scoring=read_section(config.scoring, 'scoring', ScoringSettings))


def read_data(data: ml_collections.ConfigDict) -> DataSettings:
  try:
    return read_section(data, 'data', DataSettings)
  except TypeError as error:  # A value of the wrong type reaches a comparison.
    raise ValueError(f'data: {error}') from None


def read_model(model: ml_collections.ConfigDict, data: DataSettings, *, vocab_size: int) -> LanguageModel:
  """The language model `config.model` describes, for `data`'s windows and a vocabulary of `vocab_size` tokens
  (known once the training text is read)."""
  check_keys(model, 'model', MODEL_KEYS, optional=IF_SET_CONFIG_KEYS)
  if not isinstance(model.use_bias, bool):
    raise ValueError(f'model.use_bias must be True or False, got {model.use_bias!r}')
  check_range('model.init_std', model.init_std, above=0, why="GPT-2's initialisation; the embeddings' too")
  check_range('model.randomized_positions', model.randomized_positions, at_least=0)
  check_choice('model.embedding_scaling', model.embedding_scaling, EMBEDDING_SCALINGS)
  if model.randomized_positions and model.randomized_positions < data.block_size:
    raise ValueError(f'model.randomized_positions={model.randomized_positions} must be 0 (off) or at least '
                     f'data.block_size={data.block_size}')
  transformer = transformer_config(model, max_len=max(data.block_size, model.randomized_positions))
  return LanguageModel(transformer, vocab_size=vocab_size, **{key: model[key] for key in OWN_MODEL_KEYS})


def transformer_of(config: ml_collections.ConfigDict) -> TransformerConfig:
  """The Transformer stack a language-modelling config describes, at the positions it trains."""
  return read_model(config.model, read_data(config.data), vocab_size=1).config
