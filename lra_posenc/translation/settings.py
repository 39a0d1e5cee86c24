"""A translation config, read and checked once at the task's boundary, into frozen settings.

Every check raises ValueError naming the bad key before any data is read; what runs after
receives these settings, not the ConfigDict.
"""
import dataclasses

import jax
import ml_collections

from lra_posenc.models.seq2seq import EMBEDDING_SCALINGS
from lra_posenc.models.transformer import CONFIG_KEYS, IF_SET_CONFIG_KEYS, TransformerConfig, transformer_config
from lra_posenc.training.batches import token_budget_batch_sizes
from lra_posenc.training.checkpointing import read_config
from lra_posenc.training.settings import ConfigHistory, TrainerSettings, check_keys, read_trainer_settings, section_keys
from lra_posenc.translation.input_pipeline import EOS_ID
from lra_posenc.validation import check_positive, check_range, check_section_choice

TASK = 'translation'


def _upgrade_old_config(config: dict) -> None:
  """Translation keys added since its first config.json files: loss.chunk_tokens (0, automatic: the chunk changes
  the speed, not the loss) and data.tokenizer.lowercase (False)."""
  config['loss'].setdefault('chunk_tokens', 0)
  config['data']['tokenizer'].setdefault('lowercase', False)


# How this task's older config.json files read today (`training.settings.ConfigHistory`, by task: this one), for
# `checkpointing.read_config`: the tokenizer's section named the task before configs had `task`.
CONFIG_HISTORY = {TASK: ConfigHistory(data_key='tokenizer', upgrade=_upgrade_old_config)}

TOKENIZER_MODEL_TYPES = ('unigram', 'bpe')
TASK_SECTIONS = ('loss', 'decoding')
# Training keys of this task beside the trainer's: a budget of padded tokens per batch (0: off), as
# fairseq's --max-tokens; each length bucket's batch then holds what fits (at most training.batch_size).
TRAINING_KEYS = ('max_tokens',)
# What picks the best checkpoint: teacher-forced validation token accuracy, or the sacreBLEU of
# greedy decoding of the validation split (one more decoding pass per evaluation).
SELECTION_METRICS = ('accuracy', 'bleu')


@dataclasses.dataclass(frozen=True)
class TokenizerSettings:
  """`data.tokenizer`: SentencePiece, one model for both languages if `joint`, trained on lowercased text if
  `lowercase`."""
  joint: bool
  vocab_size: int
  model_type: str
  character_coverage: float
  lowercase: bool


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """`config.data`: raw files in `data_dir` (SPLIT.LANG[.gz]) or a TFDS dataset, the splits, the longest
  training pair and evaluated source (ids with EOS; an evaluated target is cut there too, for the teacher-forced
  scores alone), and the length buckets of training batches (empty: none)."""
  data_dir: str
  tfds_name: str
  source_lang: str
  target_lang: str
  train_split: str
  validation_split: str
  test_splits: tuple[str, ...]
  max_length: int
  max_eval_source_length: int
  length_buckets: tuple[int, ...]
  tokenizer: TokenizerSettings


@dataclasses.dataclass(frozen=True)
class ModelSettings:
  """The encoder-decoder: its Transformer stack, whether source, target and output embeddings are one table,
  and how embeddings are scaled (models.seq2seq.EMBEDDING_SCALINGS)."""
  transformer: TransformerConfig
  share_embeddings: bool
  embedding_scaling: str


@dataclasses.dataclass(frozen=True)
class LossSettings:
  """Label smoothing, and target tokens per chunk of the output layer and loss (0: loss.automatic_chunk_tokens)."""
  label_smoothing: float
  chunk_tokens: int


@dataclasses.dataclass(frozen=True)
class DecodingSettings:
  """Beam search's beam (1: greedy), GNMT length penalty, most output ids (with EOS), sentences per call."""
  beam_size: int
  length_penalty: float
  max_output_length: int
  batch_size: int


@dataclasses.dataclass(frozen=True)
class TranslationSettings:
  """A translation config: the trainer's sections, the data, the model, the loss, decoding, and the padded-token
  budget of a training batch (0: off)."""
  trainer: TrainerSettings
  data: DataSettings
  model: ModelSettings
  loss: LossSettings
  decoding: DecodingSettings
  max_tokens: int

  @property
  def translator_settings(self) -> 'TranslatorSettings':
    """The sections a Translator is built from."""
    return TranslatorSettings(data=self.data, model=self.model, decoding=self.decoding)


@dataclasses.dataclass(frozen=True)
class TranslatorSettings:
  """What translating reads of a translation config: the data (tokenizer, longest evaluated source), the model
  and the search."""
  data: DataSettings
  model: ModelSettings
  decoding: DecodingSettings


# Each section's keys: its settings' fields; the model's, the Transformer stack's and ModelSettings' own.
DATA_KEYS, TOKENIZER_KEYS = section_keys(DataSettings), section_keys(TokenizerSettings)
LOSS_KEYS, DECODING_KEYS = section_keys(LossSettings), section_keys(DecodingSettings)
MODEL_KEYS = CONFIG_KEYS + tuple(key for key in section_keys(ModelSettings) if key != 'transformer')


def read_settings(config: ml_collections.ConfigDict, *, reads_text: bool = True) -> TranslationSettings:
  """Every section checked, before any data is read; without `reads_text` (synthetic benchmarks) the data is
  checked as `read_data` says."""
  trainer = read_trainer_settings(config, 'translation', TASK_SECTIONS, TRAINING_KEYS)
  check_section_choice(config.evaluation, 'evaluation', 'selection_metric', SELECTION_METRICS)
  data = read_data(config.data, reads_text=reads_text)
  max_tokens = config.training.max_tokens
  check_range('training.max_tokens', max_tokens, at_least=0)
  if max_tokens:
    if not data.length_buckets:
      raise ValueError('training.max_tokens needs data.length_buckets (a budget is shared out per length bucket)')
    token_budget_batch_sizes(data.length_buckets, max_tokens, trainer.training.batch_size, jax.device_count())
  loss = read_loss(config.loss)
  decoding = read_decoding(config.decoding)
  return TranslationSettings(trainer=trainer, data=data, model=read_model(config.model, data, decoding), loss=loss,
                             decoding=decoding, max_tokens=max_tokens)


def read_data(data: ml_collections.ConfigDict, *, reads_text: bool = True) -> DataSettings:
  """`config.data`, checked; without `reads_text` (translating with a trained run, synthetic benchmarks) what
  only reading the text needs goes unchecked: where the text is, and the length buckets."""
  check_keys(data, 'data', DATA_KEYS)
  check_keys(data.tokenizer, 'data.tokenizer', TOKENIZER_KEYS)
  check_positive(data, 'data', 'max_length', 'max_eval_source_length')
  check_range('data.tokenizer.vocab_size', data.tokenizer.vocab_size, above=EOS_ID + 1,
              why=f'ids 0-{EOS_ID} are padding, unknown, BOS and EOS')
  check_range('data.tokenizer.character_coverage', data.tokenizer.character_coverage, above=0, at_most=1)
  check_section_choice(data.tokenizer, 'data.tokenizer', 'model_type', TOKENIZER_MODEL_TYPES)
  if reads_text and not data.data_dir and not data.tfds_name:
    raise ValueError('data.data_dir is empty; set it to a directory of SPLIT.LANG[.gz] files (Multi30k: '
                     'scripts/download_multi30k.py), or set data.tfds_name')
  buckets = tuple(data.length_buckets)
  if reads_text and buckets and (list(buckets) != sorted(set(buckets)) or buckets[0] < 1
                       or buckets[-1] != data.max_length):
    raise ValueError(f'data.length_buckets={buckets} must be increasing positive lengths ending at '
                     f'data.max_length={data.max_length} (or empty: no bucketing)')
  test_splits = tuple(data.test_splits)
  if not test_splits:
    raise ValueError('data.test_splits is empty; name at least one split to score')
  if len(set(test_splits)) != len(test_splits):
    raise ValueError(f'data.test_splits={test_splits} names a split twice')
  for role, split in (('train', data.train_split), ('validation', data.validation_split)):
    if role in test_splits and split != role:  # Results name splits by role and test split alike.
      raise ValueError(f'data.test_splits={test_splits} names {role!r}, the name results give '
                       f'data.{role}_split={split!r}; score {role!r} only where data.{role}_split is {role!r}')
  if data.source_lang == data.target_lang:
    raise ValueError(f'data.source_lang and data.target_lang are both {data.source_lang!r}')
  return DataSettings(**data.to_dict() | {'test_splits': test_splits, 'length_buckets': buckets,
                                          'tokenizer': TokenizerSettings(**data.tokenizer.to_dict())})


def read_run_data(run_dir: str, data_dir: str | None = None) -> DataSettings:
  """The data settings a translation run trained with (its config.json), its text read from `data_dir` where
  given (a committed run's own data_dir is another machine's path); a run of another task is a ValueError."""
  data = read_data(read_config(run_dir, CONFIG_HISTORY).data)
  return data if data_dir is None else dataclasses.replace(data, data_dir=data_dir)


def read_loss(loss: ml_collections.ConfigDict) -> LossSettings:
  check_keys(loss, 'loss', LOSS_KEYS)
  check_range('loss.label_smoothing', loss.label_smoothing, at_least=0, below=1)
  check_range('loss.chunk_tokens', loss.chunk_tokens, at_least=0)
  return LossSettings(**loss.to_dict())


def read_decoding(decoding: ml_collections.ConfigDict) -> DecodingSettings:
  check_keys(decoding, 'decoding', DECODING_KEYS)
  check_positive(decoding, 'decoding', 'beam_size', 'max_output_length', 'batch_size')
  check_range('decoding.length_penalty', decoding.length_penalty, at_least=0)
  if decoding.batch_size % jax.local_device_count():  # Each device decodes an equal share.
    raise ValueError(f'decoding.batch_size={decoding.batch_size} is not divisible by the '
                     f'{jax.local_device_count()} local devices')
  return DecodingSettings(**decoding.to_dict())


def read_model(model: ml_collections.ConfigDict, data: DataSettings, decoding: DecodingSettings) -> ModelSettings:
  """`config.model`, for as many positions as training, evaluated sources and decoded outputs need."""
  check_keys(model, 'model', MODEL_KEYS, optional=IF_SET_CONFIG_KEYS)
  check_section_choice(model, 'model', 'embedding_scaling', EMBEDDING_SCALINGS)
  if model.share_embeddings and not data.tokenizer.joint:
    raise ValueError('model.share_embeddings=True needs data.tokenizer.joint=True (one vocabulary)')
  max_len = max(data.max_length, data.max_eval_source_length, decoding.max_output_length)
  return ModelSettings(transformer=transformer_config(model, max_len=max_len),
                       share_embeddings=model.share_embeddings, embedding_scaling=model.embedding_scaling)


def read_translator_settings(config: ml_collections.ConfigDict, *, reads_text: bool = False) -> TranslatorSettings:
  """The data, model and decoding sections of a config (a trained run's config.json, say), checked; with
  `reads_text` (a caller that reads the config's text) the data is checked as for training, where the text is
  included."""
  data = read_data(config.data, reads_text=reads_text)
  decoding = read_decoding(config.decoding)
  return TranslatorSettings(data=data, model=read_model(config.model, data, decoding), decoding=decoding)


def transformer_of(config: ml_collections.ConfigDict) -> TransformerConfig:
  """The Transformer stack a translation config describes, at the positions training and decoding need."""
  return read_translator_settings(config).model.transformer
