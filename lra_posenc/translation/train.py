"""Trains an encoder-decoder Transformer on parallel text and scores its best checkpoint with sacreBLEU.

    python -m lra_posenc.translation.train --config=configs/translation/multi30k.py:cpu \\
        --workdir=runs/multi30k_cpu --config.data.data_dir=../shared/data/multi30k

The SentencePiece model is trained on the training split into WORKDIR/tokenizer. The
best checkpoint (by `evaluation.selection_metric`) translates every test split with beam
search; hypotheses go to WORKDIR/translations/SPLIT.LANG, both BLEUs against the raw
references to results.json and their sentence statistics to WORKDIR/bleu_statistics.json
(for paired tests: lra_posenc.translation.significance). Re-running the command on the same workdir resumes.
"""
import functools
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from lra_posenc.data.files import written_whole
from lra_posenc.models import flops
from lra_posenc.models.attention import AttentionPath
from lra_posenc.models.seq2seq import Seq2SeqTransformer
from lra_posenc.models.transformer import attention_paths, with_xla_attention
from lra_posenc.training import cli, distributed
from lra_posenc.training.batches import ArrayDataset, Batch, token_budget_batch_sizes
from lra_posenc.training.distributed import replicate
from lra_posenc.training.task import Params, Task, Workload, synthetic_task, timed_windows
from lra_posenc.translation import bleu, input_pipeline, loss
from lra_posenc.translation.input_pipeline import EOS_ID, PAD_ID
from lra_posenc.translation.settings import DataSettings, LossSettings, TranslationSettings, read_settings
from lra_posenc.translation.translator import Translator, build_translator

def translation_metrics(model: Seq2SeqTransformer, loss_settings: LossSettings, params: Params,
                        batch: Batch, rng: jax.Array | None) -> dict[str, jax.Array]:
  """Sums over target tokens: label-smoothed loss (minus its floor, so 0 is perfect), NLL, accuracy.

  Tokens are weighted by their row's weight (0 for eval padding rows) and by not being padding.
  """
  train = rng is not None
  targets = batch['targets']
  states, table, bias = model.apply({'params': params}, batch['inputs'], targets, train=train,
                                    rngs={'dropout': rng} if train else {}, method=Seq2SeqTransformer.output_layer_inputs)
  weight = (targets != PAD_ID) * batch['weight'][:, None]
  sums = loss.token_sums(states, table, bias, targets, weight, label_smoothing=loss_settings.label_smoothing,
                         chunk_tokens=loss_settings.chunk_tokens or loss.automatic_chunk_tokens(jax.default_backend()))
  return {'loss': sums.loss, 'nll': sums.nll, 'accuracy': sums.correct, 'count': weight.sum()}


def translations_path(workdir: str, split: str, lang: str, checkpoint: str = 'best') -> str:
  """Where training writes `checkpoint`'s beam-search translations of `split`: WORKDIR/translations/
  for the best checkpoint, WORKDIR/translations/CHECKPOINT/ for another (`averaged`)."""
  directory = os.path.join(workdir, 'translations')
  return os.path.join(directory if checkpoint == 'best' else os.path.join(directory, checkpoint), f'{split}.{lang}')


def read_translations(path: str, count: int) -> list[str]:
  """The `count` translations training wrote to `path`, one per line; any other count is an error."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{path}: no translations (training writes them when it ends)')
  with open(path, encoding='utf-8', newline='\n') as f:
    lines = f.read().split('\n')
  if lines[-1] == '':
    lines.pop()  # The newline that ends the last line.
  if len(lines) != count:
    raise ValueError(f'{path}: {len(lines)} translations for {count} references')
  return lines


def _bucketing(settings: TranslationSettings) -> dict:
  """The length-bucketing arguments of `ArrayDataset`'s bucketed batches and their shapes."""
  return dict(buckets=settings.data.length_buckets, lengths_key='lengths', sequence_keys=('inputs', 'targets'),
              seed=settings.trainer.seed, max_tokens=settings.max_tokens, multiple_of=jax.device_count())


def train_batches(dataset: ArrayDataset, settings: TranslationSettings, start: int) -> Iterator[Batch]:
  batch_size = settings.trainer.training.batch_size
  if settings.data.length_buckets:
    return dataset.bucketed_train_batches(batch_size, start=start, **_bucketing(settings))
  return dataset.train_batches(batch_size, seed=settings.trainer.seed, start=start)


def train_batch_shapes(dataset: ArrayDataset, settings: TranslationSettings
                       ) -> tuple[dict[str, jax.ShapeDtypeStruct], ...]:
  """The shapes `train_batches` yields: one per length bucket."""
  batch_size = settings.trainer.training.batch_size
  if settings.data.length_buckets:
    return dataset.bucketed_train_batch_shapes(batch_size, **_bucketing(settings))
  return (dataset.train_batch_shape(batch_size),)


def training_attention_paths(model: Seq2SeqTransformer, lengths: Sequence[int], device: Any = None
                             ) -> dict[str, AttentionPath]:
  """How each attention call computes over training batches of these `lengths` (ids, both sides): one path
  per call where every length takes the same, else one per call and length (cuDNN trains with a bias or
  key padding only at even lengths, so an odd length bucket can take XLA where the others take cuDNN)."""
  by_length = {length: attention_paths(model.config, model.attention_calls(length, length), device)
               for length in sorted(set(lengths))}
  paths = list(by_length.values())
  if all(named == paths[0] for named in paths):
    return paths[0]
  return {f'{name}, {length} ids': path for length, named in by_length.items() for name, path in named.items()}


def read_text(data: DataSettings, split: str) -> input_pipeline.ParallelText:
  if data.tfds_name:
    return input_pipeline.read_tfds_split(data.tfds_name, split, data.source_lang, data.target_lang, data.data_dir)
  return input_pipeline.read_split(data.data_dir, split, data.source_lang, data.target_lang)


def benchmark_workload(config: ml_collections.ConfigDict) -> Workload:
  """The model `config` describes, on random source and target ids: `data.max_length` of each, from
  `data.tokenizer.vocab_size` (no tokenizer is trained, no text read)."""
  translation = read_settings(config, reads_text=False)
  vocab_size, length = translation.data.tokenizer.vocab_size, translation.data.max_length
  translator = build_translator(translation.translator_settings, None, (vocab_size, vocab_size))
  model = translator.model

  def batch(examples: int, rng: np.random.Generator) -> Batch:
    ids = lambda: rng.integers(EOS_ID + 1, vocab_size, (examples, length), dtype=np.int32)
    return {'inputs': ids(), 'targets': ids(), 'weight': np.ones((examples,), np.float32)}

  example = np.zeros((1, length), np.int32)
  init = lambda rng: model.init({'params': rng}, example, example, train=False)['params']
  sources = np.zeros((translator.batch_size, translator.max_source_length), np.int32)
  sources[:, :length] = batch(translator.batch_size, np.random.default_rng(translation.trainer.seed))['inputs']
  decode = functools.partial(measure_beam_search, translator, sources,
                             lambda: init(jax.random.PRNGKey(translation.trainer.seed)))
  counted = with_xla_attention(model)
  forward = lambda params, sources, targets: counted.apply({'params': params}, sources, targets, train=False)
  return Workload(
      task=synthetic_task(translation.trainer, init,
                                       functools.partial(translation_metrics, model, translation.loss),
                                       attention_paths(model.config, model.attention_calls(length, length))),
      batch=batch,
      forward_flops=flops.forward_flops(forward, init, example, example),
      tokens_per_example=2 * length,
      dtype=model.config.dtype.name,
      decode=decode)


def measure_beam_search(translator: Translator, sources: np.ndarray, init_params: Callable[[], Any],
                        windows: int) -> dict[str, Any]:
  """Median sentences/s of batched beam search (`decoding.beam_size`) at `decoding.batch_size`, on parameters
  from `init_params`.

  `sources` fill the training batches' `data.max_length` ids. Random parameters seldom emit EOS, so every
  hypothesis runs to `decoding.max_output_length` ids: the worst case of a trained model.
  """
  params = replicate(jax.jit(init_params)())
  start = time.perf_counter()
  outputs = translator.translate_ids(params, sources)
  first_call_seconds = time.perf_counter() - start
  seconds = timed_windows(lambda: translator.translate_ids(params, sources), windows)
  return {'first_call_seconds': first_call_seconds, 'beam_size': translator.beam_size,
          'sentences_per_second': translator.batch_size / statistics.median(seconds),
          'output_ids_per_sentence': float(np.mean((outputs != 0).sum(axis=1)))}


def create_task(config: ml_collections.ConfigDict, workdir: str) -> Task:
  """Validates the config, reads every split, trains or loads the tokenizer and builds the task."""
  settings = read_settings(config)
  data = settings.data
  splits = {'train': data.train_split, 'validation': data.validation_split} | {s: s for s in data.test_splits}
  texts = {name: read_text(data, split) for name, split in splits.items()}
  tokenizer_dir = input_pipeline.tokenizer_directory(workdir)
  distributed.on_primary(lambda: input_pipeline.write_missing_tokenizers(
      tokenizer_dir, texts['train'], joint=data.tokenizer.joint, vocab_size=data.tokenizer.vocab_size,
      model_type=data.tokenizer.model_type, character_coverage=data.tokenizer.character_coverage,
      lowercase=data.tokenizer.lowercase),
      f'training the tokenizer into {tokenizer_dir}')
  tokenizers = input_pipeline.workdir_tokenizers(workdir, joint=data.tokenizer.joint,
                                                 lowercase=data.tokenizer.lowercase)
  corpus_sacrebleu = functools.partial(bleu.sacrebleu_scores, lowercase=data.tokenizer.lowercase)
  datasets = {}
  for name, text in texts.items():
    train = name == 'train'
    datasets[name], report = input_pipeline.encode_split(
        text, tokenizers, split=splits[name], train=train, max_length=data.max_length if train else data.max_eval_source_length)
    logging.info('%s: %d pairs; skipped %s; cut to max length: %d', report.split, report.examples,
                 report.skipped or 'none', report.truncated)
  batch_size = settings.trainer.training.batch_size
  if settings.max_tokens:
    logging.info('training.max_tokens=%d: sentences per batch by length bucket %s', settings.max_tokens,
                 dict(zip(data.length_buckets, token_budget_batch_sizes(
                     data.length_buckets, settings.max_tokens, batch_size, jax.device_count()))))
  translator = build_translator(settings.translator_settings, tokenizers)
  model = translator.model

  greedy = translator.with_search(beam_size=1)

  def hypotheses(search: Translator, replicated_params, split: str, what: str) -> list[str]:
    """`search`'s detokenized translations of a split's sources."""
    outputs = search.translate_ids(replicated_params, datasets[split].arrays['inputs'], what)
    return [input_pipeline.decode_ids(tokenizers.target, row) for row in outputs]

  def score_test(replicated_params, split: str, which: str) -> dict:
    """BLEU of beam search; hypotheses go to WORKDIR/translations/ (best) or translations/averaged/, sentence
    statistics to WORKDIR/bleu_statistics.json."""
    translations = hypotheses(translator, replicated_params, split,
                              f'{which}: beam search on {split} (beam {translator.beam_size})')
    if distributed.is_primary():
      path = translations_path(workdir, split, data.target_lang, which)
      os.makedirs(os.path.dirname(path), exist_ok=True)
      with written_whole(path, encoding='utf-8', newline='\n') as f:
        f.writelines(h + '\n' for h in translations)
      bleu.record_statistics(workdir, which, split, translations, texts[split].targets, data)
    scores = bleu.scores(translations, texts[split].targets, data)
    logging.info('%s, %s: sacreBLEU %.2f (%s); tokenized lowercased BLEU %.2f (%s)', which, split, scores['bleu'],
                 scores['bleu_signature'], scores['tokenized_bleu'], scores['tokenized_bleu_signature'])
    return scores

  def score_validation(replicated_params) -> dict[str, float]:
    translations = hypotheses(greedy, replicated_params, 'validation', 'greedy decoding of validation')
    return {'bleu': corpus_sacrebleu(translations, texts['validation'].targets)['bleu']}

  example = jnp.zeros((1, data.max_length), jnp.int32)
  batch_shapes = train_batch_shapes(datasets['train'], settings)
  return Task(
      init_params=lambda rng: model.init({'params': rng}, example, example, train=False)['params'],
      metrics=functools.partial(translation_metrics, model, settings.loss),
      train_batches=functools.partial(train_batches, datasets['train'], settings),
      train_batch_shapes=batch_shapes,
      eval_batches=lambda split: datasets[split].eval_batches(
          settings.trainer.evaluation.batch_size, lengths_key='lengths', sequence_keys=('inputs', 'targets')),
      score_validation=score_validation if settings.trainer.evaluation.selection_metric == 'bleu' else None,
      artifacts={'tokenizer': tokenizers.fingerprints},
      settings=settings.trainer,
      attention_paths=training_attention_paths(model, [shape['inputs'].shape[-1] for shape in batch_shapes]),
      baselines={f'{split}_copy_source_bleu': corpus_sacrebleu(texts[split].sources, texts[split].targets)['bleu']
                 for split in data.test_splits},
      test_splits=data.test_splits,
      score_test=score_test,
      count_unit='target_tokens')


if __name__ == '__main__':
  cli.run_training(create_task, 'configs/translation/multi30k.py:cpu')
