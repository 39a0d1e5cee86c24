"""The two BLEUs the translation task reports, their sentence statistics, and paired tests on them.

BLEU is a function of sums over sentences of ten counts (sacreBLEU's sufficient statistics:
hypothesis and reference length, matched and total n-grams for n = 1..4). A run keeps those
counts per test sentence in WORKDIR/bleu_statistics.json: numbers only, no text, so that runs
trained in different places can be compared sentence by sentence (paired bootstrap resampling,
approximate randomization) long after their translations and the test data are gone.
"""
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import sacrebleu
import sacremoses

from lra_posenc.training.run_files import locked, read_json_if_present, write_json
from lra_posenc.translation.settings import DataSettings

MAX_NGRAM_ORDER = 4
STATISTICS_FIELDS = ('hyp_len', 'ref_len') + tuple(f'correct_{n}' for n in range(1, MAX_NGRAM_ORDER + 1)) + tuple(
    f'total_{n}' for n in range(1, MAX_NGRAM_ORDER + 1))
STATISTICS_FILE = 'bleu_statistics.json'
BLEU_NAMES = ('bleu', 'tokenized_bleu')  # `protocols`, as results.json names them.
# sacreBLEU's default seed of its paired tests: the same resamples and trials as `sacrebleu --paired-bs/-ar`.
SEED = 12345
PAIRED_TESTS = {'bootstrap': 'bs', 'randomization': 'ar'}  # The names sacreBLEU's signatures use.
DEFAULT_SAMPLES = {'bootstrap': 1000, 'randomization': 10000}


class BleuProtocol(NamedTuple):
  """One BLEU this task reports: sacreBLEU's `metric` on text as `prepare` leaves it."""
  metric: sacrebleu.metrics.BLEU
  prepare: Callable[[Sequence[str]], list[str]]
  tokenizer_name: str  # Prefixed to sacreBLEU's signature when `prepare` tokenizes.

  def signature(self, metric_signature: sacrebleu.metrics.base.Signature | None = None) -> str:
    """sacreBLEU's signature of `metric` (or the one given, e.g. a paired test's), naming the tokenizer."""
    signature = str(metric_signature or self.metric.get_signature())
    return f'{self.tokenizer_name}|{signature}' if self.tokenizer_name else signature

  def score(self, hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU, as sacreBLEU computes it."""
    return self.metric.corpus_score(self.prepare(hypotheses), [self.prepare(references)]).score

  def sentence_statistics(self, hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Every sentence's counts (`STATISTICS_FIELDS`), shape (sentences, 10); their sum gives the corpus BLEU."""
    if len(hypotheses) != len(references):
      raise ValueError(f'{len(hypotheses)} hypotheses for {len(references)} references')
    rows = []
    for hypothesis, reference in zip(self.prepare(hypotheses), self.prepare(references)):
      score = self.metric.corpus_score([hypothesis], [[reference]])
      rows.append([score.sys_len, score.ref_len, *score.counts, *score.totals])
    return np.array(rows, np.int64).reshape(-1, len(STATISTICS_FIELDS))

  def score_of_sums(self, sums: np.ndarray) -> float:
    """BLEU of statistics summed over a corpus (or a resample of one): a row of `STATISTICS_FIELDS`."""
    sums = [int(x) for x in sums]
    return sacrebleu.metrics.BLEU.compute_bleu(
        correct=sums[2:2 + MAX_NGRAM_ORDER], total=sums[2 + MAX_NGRAM_ORDER:], sys_len=sums[0], ref_len=sums[1],
        smooth_method=self.metric.smooth_method, smooth_value=self.metric.smooth_value,
        effective_order=self.metric.effective_order, max_ngram_order=MAX_NGRAM_ORDER).score


def single_reference_bleu(**options: Any) -> sacrebleu.metrics.BLEU:
  """sacreBLEU's BLEU with `options`, against one reference per sentence, as every BLEU here is: its
  signature (nrefs:1) is then known before it has scored anything, e.g. for recorded statistics."""
  metric = sacrebleu.metrics.BLEU(**options)
  metric.num_refs = 1
  return metric


def sacrebleu_protocol(lowercase: bool = False) -> BleuProtocol:
  """sacreBLEU on detokenized text (its default 13a tokenisation): the headline.

  Cased unless `lowercase` (a model trained on lowercased text, `data.tokenizer.lowercase`: its signature
  then says case:lc).
  """
  return BleuProtocol(single_reference_bleu(lowercase=lowercase), list, '')


def tokenized_bleu_protocol(lang: str) -> BleuProtocol:
  """BLEU as the Multi30k literature reports it: Moses-tokenized, lowercased, on tokens, unsmoothed.

  multi-bleu.perl -lc on tokenizer.perl output computes this; here sacremoses tokenizes
  (language `lang`, default rules) and sacreBLEU scores the tokens as they are.
  """
  tokenizer = sacremoses.MosesTokenizer(lang=lang)
  # force: the text is tokenized on purpose, so sacreBLEU's warning about tokenized input does not apply.
  return BleuProtocol(single_reference_bleu(tokenize='none', lowercase=True, smooth_method='none', force=True),
                      lambda lines: [tokenizer.tokenize(line, escape=False, return_str=True) for line in lines],
                      f'moses:{lang}')


def protocols(data: DataSettings) -> dict[str, BleuProtocol]:
  """Both BLEUs of every test score of this task, by their results.json names: sacreBLEU (lowercased
  when the tokenizer is, `data.tokenizer.lowercase`) and the tokenized lowercased BLEU."""
  return dict(zip(BLEU_NAMES, (sacrebleu_protocol(data.tokenizer.lowercase),
                               tokenized_bleu_protocol(data.target_lang))))


def protocol_scores(name: str, protocol: BleuProtocol, hypotheses: Sequence[str], references: Sequence[str]
                    ) -> dict[str, float | str]:
  """`{name: score, name_signature: ...}` of one BLEU of a corpus."""
  return {name: protocol.score(hypotheses, references), f'{name}_signature': protocol.signature()}


def sacrebleu_scores(hypotheses: Sequence[str], references: Sequence[str], *, lowercase: bool = False
                     ) -> dict[str, float | str]:
  """sacreBLEU (`sacrebleu_protocol`): `bleu` and `bleu_signature`."""
  return protocol_scores('bleu', sacrebleu_protocol(lowercase), hypotheses, references)


def scores(hypotheses: Sequence[str], references: Sequence[str], data: DataSettings
           ) -> dict[str, float | str]:
  """Both BLEUs of a split's translations (`protocols`), with their signatures."""
  result = {}
  for name, protocol in protocols(data).items():
    result |= protocol_scores(name, protocol, hypotheses, references)
  return result


# ---------------------------------------------------------------------------------------------------
# Sentence statistics on disk.
# ---------------------------------------------------------------------------------------------------
class SplitStatistics(NamedTuple):
  """One BLEU of one checkpoint's translations of one split, as a run recorded it."""
  signature: str
  score: float
  statistics: np.ndarray  # (sentences, len(STATISTICS_FIELDS)) int64.


def statistics_path(run_dir: str) -> str:
  return os.path.join(run_dir, STATISTICS_FILE)


def record_statistics(run_dir: str, checkpoint: str, split: str, hypotheses: Sequence[str],
                      references: Sequence[str], data: DataSettings) -> dict[str, np.ndarray]:
  """Adds both BLEUs' sentence statistics of `checkpoint`'s translations of `split` to RUN_DIR/bleu_statistics.json,
  and returns them by BLEU name.

  The file is replaced whole (written beside it, then renamed), so an interrupted write leaves the old one, and
  under a lock, so that processes recording other splits or checkpoints at once keep each other's entries.
  """
  statistics, entries = {}, {}
  for name, protocol in protocols(data).items():
    statistics[name] = protocol.sentence_statistics(hypotheses, references)
    entries[name] = {'score': protocol.score(hypotheses, references), 'signature': protocol.signature(),
                     'statistics': statistics[name].tolist()}
  path = statistics_path(run_dir)
  with locked(path):
    content = read_json_if_present(path) or {'fields': list(STATISTICS_FIELDS), 'checkpoints': {}}
    content['checkpoints'].setdefault(checkpoint, {})[split] = entries
    write_json(path, content, sort_keys=False, compact=True)
  return statistics


def without_version(signature: str) -> str:
  """A signature without sacreBLEU's version: statistics do not change between its releases."""
  return '|'.join(field for field in signature.split('|') if not field.startswith('version:'))


def read_statistics(run_dir: str, checkpoint: str, split: str, name: str, protocol: BleuProtocol
                    ) -> SplitStatistics | None:
  """What RUN_DIR/bleu_statistics.json holds for one BLEU of a checkpoint and split, or None if it has nothing.

  Raises if the record was made with another BLEU than `protocol`, or if its statistics do not give
  the score recorded beside them.
  """
  path = statistics_path(run_dir)
  content = read_json_if_present(path)
  if content is None:
    return None
  entry = content['checkpoints'].get(checkpoint, {}).get(split, {}).get(name)
  if entry is None:
    return None
  if content['fields'] != list(STATISTICS_FIELDS):
    raise ValueError(f'{path}: fields {content["fields"]}; expected {list(STATISTICS_FIELDS)}')
  where = f'{path}: {checkpoint}, {split}, {name}'
  if without_version(entry['signature']) != without_version(protocol.signature()):
    raise ValueError(f'{where}: recorded with {entry["signature"]}, not {protocol.signature()}')
  statistics = np.array(entry['statistics'], np.int64).reshape(-1, len(STATISTICS_FIELDS))
  if not np.isclose(protocol.score_of_sums(statistics.sum(0)), entry['score'], rtol=0, atol=1e-9):
    raise ValueError(f'{where}: the statistics give BLEU {protocol.score_of_sums(statistics.sum(0))}, '
                     f'not the recorded {entry["score"]}')
  return SplitStatistics(entry['signature'], entry['score'], statistics)


# ---------------------------------------------------------------------------------------------------
# Paired tests.
# ---------------------------------------------------------------------------------------------------
class PairedResult(NamedTuple):
  """A system's BLEU; the bootstrap mean and 95% half-interval (bootstrap only); p of its difference from
  the baseline (None for the baseline)."""
  score: float
  mean: float | None
  ci95: float | None
  p_value: float | None


def paired_test(protocol: BleuProtocol, statistics: Sequence[np.ndarray], test: str = 'bootstrap',
                samples: int = 0) -> list[PairedResult]:
  """sacreBLEU's paired test of every system's sentence statistics against the first's (the baseline).

  bootstrap: Koehn (2004) paired bootstrap resampling: `samples` resamples of the sentences (1000 by
  default), each system's BLEU on each; p is the share of resamples whose absolute difference from
  the baseline, centred on its mean, exceeds the observed one. randomization: approximate randomization
  (Riezler and Maxwell 2005): `samples` trials (10000) that swap each sentence's two translations at
  random; p is the share of trials with a larger absolute difference. Both count with the +1 of
  sacreBLEU and draw its resamples and trials (seed 12345), so they give its p-values and intervals.
  A system whose BLEU equals the baseline's gets p = 1 (sacreBLEU gives its smallest p when every
  sentence scores alike, as a difference of 0 is never exceeded).
  """
  check_paired_test(test, samples)
  samples = samples or DEFAULT_SAMPLES[test]
  sentences = len(statistics[0])
  for i, system in enumerate(statistics):
    if system.shape != (sentences, len(STATISTICS_FIELDS)):
      raise ValueError(f'system {i}: statistics of shape {system.shape}; the baseline has '
                       f'{(sentences, len(STATISTICS_FIELDS))}')
  rng = np.random.default_rng(SEED)

  def scores_of(sums: np.ndarray) -> np.ndarray:
    return np.array([protocol.score_of_sums(row) for row in sums])

  observed = [protocol.score_of_sums(system.sum(0)) for system in statistics]
  if test == 'bootstrap':
    resampled = bootstrap_scores(protocol, statistics, samples)
    results = [PairedResult(observed[0], *interval(resampled[0]), None)]
    for score, scores in zip(observed[1:], resampled[1:]):
      differences = np.abs(scores - resampled[0])
      results.append(PairedResult(score, *interval(scores), p_value(
          differences - differences.mean(), abs(score - observed[0]))))
    return results
  swap = rng.integers(2, size=(samples, sentences), dtype=bool).astype(np.int64)
  results = [PairedResult(observed[0], None, None, None)]
  for score, system in zip(observed[1:], statistics[1:]):
    baseline = statistics[0]
    first = scores_of(swap @ baseline + (1 - swap) @ system)
    second = scores_of((1 - swap) @ baseline + swap @ system)
    results.append(PairedResult(score, None, None, p_value(np.abs(first - second), abs(score - observed[0]))))
  return results


def bootstrap_scores(protocol: BleuProtocol, statistics: Sequence[np.ndarray], samples: int) -> list[np.ndarray]:
  """Each system's BLEU on `samples` resamples of the sentences with replacement, the same resamples for every
  system, drawn as sacreBLEU draws them (its seed): [samples] per system."""
  sentences = len(statistics[0])
  resamples = np.random.default_rng(SEED).choice(sentences, size=(samples, sentences), replace=True)
  counts = np.zeros((samples, sentences), np.int64)  # How often each resample draws each sentence.
  np.add.at(counts, (np.arange(samples)[:, None], resamples), 1)
  return [np.array([protocol.score_of_sums(row) for row in counts @ system]) for system in statistics]


def two_sided_bootstrap(protocol: BleuProtocol, baseline: np.ndarray, system: np.ndarray,
                        samples: int = DEFAULT_SAMPLES['bootstrap']) -> float:
  """The paired bootstrap's two-sided p of `system` against `baseline` (sentence statistics [sentences, fields]):
  the signed BLEU differences over sacreBLEU's resamples, centred on their mean (the null of no difference), and
  p = (1 + resamples whose centred difference exceeds the observed one in absolute value) / (1 + samples).
  sacreBLEU's own test centres the absolute differences instead, which counts one tail only."""
  observed = protocol.score_of_sums(system.sum(0)) - protocol.score_of_sums(baseline.sum(0))
  base, other = bootstrap_scores(protocol, [baseline, system], samples)
  differences = other - base
  return p_value(np.abs(differences - differences.mean()), abs(observed))


def check_paired_test(test: str, samples: int) -> None:
  if test not in PAIRED_TESTS:
    raise ValueError(f'test {test!r}; valid: {sorted(PAIRED_TESTS)}')
  if samples < 0:
    raise ValueError(f"samples {samples}: the number of resamples or trials, or 0 for sacreBLEU's default")


def interval(scores: np.ndarray) -> tuple[float, float]:
  """Mean of resampled scores and half the width of their central 95% (sacreBLEU's order statistics)."""
  ordered = np.sort(scores)
  lower = len(ordered) // 40
  return float(ordered.mean()), float(0.5 * (ordered[len(ordered) - lower - 1] - ordered[lower]))


def p_value(sampled: np.ndarray, observed: float) -> float:
  """(1 + samples exceeding the observed difference) / (1 + samples); 1 for no difference at all."""
  if observed == 0:
    return 1.0
  return (int(np.sum(sampled > observed)) + 1) / (len(sampled) + 1)


def paired_signature(protocol: BleuProtocol, test: str, samples: int) -> str:
  """The protocol's signature with the test, its size and the seed, as sacreBLEU signs a paired test."""
  signature = protocol.metric.get_signature()
  signature.update('seed', str(SEED))
  signature.update(PAIRED_TESTS[test], samples or DEFAULT_SAMPLES[test])
  return protocol.signature(signature)
