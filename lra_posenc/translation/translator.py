"""Batched, pmapped generation with a trained Seq2SeqTransformer: ids in, ids or text out."""
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from lra_posenc import progress
from lra_posenc.models import decoding
from lra_posenc.models.seq2seq import Seq2SeqTransformer
from lra_posenc.training import distributed
from lra_posenc.training.task import Params
from lra_posenc.translation.input_pipeline import BOS_ID, EOS_ID, PAD_ID, Tokenizers, decode_ids, pad_ids
from lra_posenc.translation.settings import ModelSettings, TranslatorSettings, read_translator_settings
from lra_posenc.validation import check_range


class Translator:
  """Greedy search (beam_size 1) or beam search with a key/value cache, over all local devices.

  Attributes:
    model: the model as trained (decode=False); its decode twin shares the parameters.
    tokenizers: for `translate` (text); None serves ids only (`translate_ids`, `predict`).
    beam_size: 1 selects greedy search.
    length_penalty: GNMT alpha for beam search.
    max_source_length: source ids per sentence of `translate` (with EOS; longer ones are cut).
    max_output_length: most output ids (with EOS).
    batch_size: sentences per call to the devices; divisible by the local device count.
  """

  def __init__(self, model: Seq2SeqTransformer, tokenizers: Tokenizers | None, *, beam_size: int, length_penalty: float,
               max_source_length: int, max_output_length: int, batch_size: int):
    longest = max(max_source_length, max_output_length)
    if longest > model.config.max_len:
      raise ValueError(f'decoding {longest} positions needs a model with max_len >= {longest}, '
                       f'got {model.config.max_len}')
    if batch_size % jax.local_device_count():
      raise ValueError(f'batch size {batch_size} is not divisible by the {jax.local_device_count()} local devices')
    self.model = model
    self.tokenizers = tokenizers
    self.beam_size = beam_size
    self.length_penalty = length_penalty
    self.max_source_length = max_source_length
    self.max_output_length = max_output_length
    self.batch_size = batch_size
    self._predict = jax.pmap(self.predict)

  def with_search(self, *, beam_size: int | None = None, length_penalty: float | None = None) -> 'Translator':
    """This translator with another beam (1: greedy) or length penalty where given, all else alike; raises
    ValueError for a beam below 1 or a negative penalty."""
    if beam_size is not None:
      check_range('beam_size', beam_size, at_least=1)
    if length_penalty is not None:
      check_range('length_penalty', length_penalty, at_least=0)
    return Translator(self.model, self.tokenizers, beam_size=self.beam_size if beam_size is None else beam_size,
                      length_penalty=self.length_penalty if length_penalty is None else length_penalty,
                      max_source_length=self.max_source_length, max_output_length=self.max_output_length,
                      batch_size=self.batch_size)

  def decoding_state(self, params: Params, inputs: jax.Array, beams: int) -> tuple[decoding.StepFn, decoding.Cache]:
    """The step function and empty cache for decoding `inputs` [batch, source_length] with `beams` rows each."""
    rows = inputs.shape[0] * beams
    stepper = self.model.clone(decode=True)
    encoded = self.model.apply({'params': params}, inputs, train=False, method=Seq2SeqTransformer.encode)
    encoded, valid = decoding.tile_beams((encoded, inputs != PAD_ID), beams)
    cache_shapes = jax.eval_shape(functools.partial(
        stepper.init, jax.random.PRNGKey(0), valid.astype(jnp.int32),
        jnp.ones((rows, self.model.config.max_len), jnp.int32), train=False))['cache']

    def step(tokens, cache):
      logits, updated = stepper.apply({'params': params, 'cache': cache}, tokens, encoded, valid, train=False,
                                      method=Seq2SeqTransformer.decode_logits, mutable=['cache'])
      return logits[:, 0], updated['cache']

    return step, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), cache_shapes)

  def predict(self, params: Params, inputs: jax.Array) -> jax.Array:
    """Output ids [batch, max_output_length] for source ids [batch, source_length]; jit-compatible."""
    step, cache = self.decoding_state(params, inputs, self.beam_size)
    search = dict(batch_size=inputs.shape[0], max_length=self.max_output_length, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID)
    if self.beam_size == 1:
      return decoding.greedy_search(step, cache, **search)
    return decoding.beam_search(step, cache, beam_size=self.beam_size, alpha=self.length_penalty, **search)

  def translate_ids(self, replicated_params: Params, inputs: np.ndarray, what: str = 'decoding') -> np.ndarray:
    """Output ids [N, max_output_length] for every row of `inputs` [N, source_length], in order (none for none);
    `replicated_params` as `distributed.replicate` places them.

    Progress (batches decoded, ETA) is reported under `what`.
    """
    devices = jax.local_device_count()
    outputs = []
    for begin in progress.track(range(0, len(inputs), self.batch_size), what, unit='batches'):
      batch = inputs[begin:begin + self.batch_size]
      padded = np.zeros((self.batch_size,) + inputs.shape[1:], inputs.dtype)
      padded[:len(batch)] = batch
      result = self._predict(replicated_params, padded.reshape((devices, -1) + inputs.shape[1:]))
      outputs.append(np.asarray(result).reshape(self.batch_size, -1)[:len(batch)])
    return np.concatenate(outputs) if outputs else np.zeros((0, self.max_output_length), np.int32)

  def translate(self, params: Params, sentences: Sequence[str]) -> list[str]:
    """Detokenized translations of raw `sentences`, with unreplicated `params`."""
    inputs = pad_ids(self.tokenizers.encode_sources(sentences), self.max_source_length)
    outputs = self.translate_ids(distributed.replicate(params), inputs)
    return [decode_ids(self.tokenizers.target, row) for row in outputs]


def create_model(model: ModelSettings, source_vocab_size: int, target_vocab_size: int) -> Seq2SeqTransformer:
  return Seq2SeqTransformer(model.transformer, source_vocab_size=source_vocab_size,
                            target_vocab_size=target_vocab_size, share_embeddings=model.share_embeddings,
                            bos_id=BOS_ID, pad_id=PAD_ID, embedding_scaling=model.embedding_scaling)


def build_translator(settings: TranslatorSettings, tokenizers: Tokenizers | None,
                     vocab_sizes: tuple[int, int] | None = None) -> Translator:
  """The translator of these settings; without `tokenizers` (ids only) give the `vocab_sizes`."""
  if tokenizers is not None:
    vocab_sizes = tokenizers.source.get_piece_size(), tokenizers.target.get_piece_size()
  search = settings.decoding
  return Translator(create_model(settings.model, *vocab_sizes), tokenizers, beam_size=search.beam_size,
                    length_penalty=search.length_penalty, max_source_length=settings.data.max_eval_source_length,
                    max_output_length=search.max_output_length, batch_size=search.batch_size)


def create_translator(config: ml_collections.ConfigDict, tokenizers: Tokenizers | None,
                      vocab_sizes: tuple[int, int] | None = None) -> Translator:
  """The translator a translation config describes (a trained run's config.json, say), its data (what
  translating reads of it), model and decoding sections checked: for callers holding a config, not settings."""
  return build_translator(read_translator_settings(config), tokenizers, vocab_sizes)
