"""Paired significance of BLEU differences between translation runs, from their sentence statistics.

    python -m lra_posenc.translation.significance results/multi30k_tiny/runs/sinusoidal/seed_1 \\
        results/multi30k_tiny/runs/rope/seed_1 results/multi30k_tiny/runs/rope/seed_1:averaged

A system is a run directory and the checkpoint to compare: `best` (the default) or `averaged`; the
first system is the baseline. A run directory is a workdir or a copy of its config.json and
bleu_statistics.json, the per-sentence counts BLEU is computed from (numbers, no text), which
training writes beside results.json: runs compared this way need neither the test data nor their
translations. A workdir that has translations (translations/SPLIT.LANG, translations/averaged/) but
no statistics, as training left it before it wrote them, is scored from its translations against
the references in --data_dir (by default the baseline config's data.data_dir);
--save_statistics then adds them to its bleu_statistics.json.

For every test split of the runs and both BLEUs the trainer reports (sacreBLEU and the tokenized
lowercased BLEU), each system is compared with the baseline on the same sentences: paired bootstrap
resampling (Koehn 2004; `--test=bootstrap`, 1000 resamples) or approximate randomization
(`--test=randomization`, 10000 trials), drawn as sacreBLEU draws them (seed 12345), so that the
p-values are those of `sacrebleu --paired-bs` / `--paired-ar` on the translations. Each row gives the
system's BLEU, the bootstrap mean and 95% interval (bootstrap only) and the p-value of its
difference from the baseline; a system with exactly the baseline's BLEU gets p = 1.

What this measures is the test set's sampling noise for fixed models. It says nothing of the
spread between training seeds: a difference significant over test sentences can still be within
seed-to-seed variation, which only more seeds measure.
"""
import argparse
import functools
import json
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from lra_posenc.data.files import written_whole
from lra_posenc.translation import bleu
from lra_posenc.translation import train as translation_train
from lra_posenc.translation.settings import DataSettings, read_run_data
from lra_posenc.translation.translate import CHECKPOINTS

# Settings of `config.data` that must agree across the systems for their scores to be comparable.
SHARED_DATA_KEYS = ('tfds_name', 'source_lang', 'target_lang', 'test_splits', 'tokenizer.lowercase')


def parse_system(spec: str) -> tuple[str, str]:
  """`RUN_DIR[:CHECKPOINT]` as (run directory, checkpoint)."""
  run_dir, _, checkpoint = spec.partition(':')
  checkpoint = checkpoint or 'best'
  if checkpoint not in CHECKPOINTS:
    raise ValueError(f'{spec}: checkpoint {checkpoint!r}; valid: {list(CHECKPOINTS)}')
  return run_dir, checkpoint


def check_comparable(datas: dict[str, DataSettings]) -> None:
  """Raises, naming the setting, if the systems' data settings differ where their scores depend on it."""
  value = lambda data, key: functools.reduce(getattr, key.split('.'), data)
  first_name, first = next(iter(datas.items()))
  for name, data in datas.items():
    for key in SHARED_DATA_KEYS:
      if value(data, key) != value(first, key):
        raise ValueError(f'data.{key} is {value(data, key)!r} in {name} but {value(first, key)!r} in '
                         f'{first_name}: their scores are not comparable')


def system_statistics(run_dir: str, checkpoint: str, split: str, data: DataSettings,
                      references: Callable[[], list[str]], save: bool) -> dict[str, np.ndarray]:
  """Sentence statistics of both BLEUs of `checkpoint` on `split`: as recorded in the run's
  bleu_statistics.json, or else computed from its translations (and recorded there if `save`)."""
  protocols = bleu.protocols(data)
  recorded = {name: bleu.read_statistics(run_dir, checkpoint, split, name, protocol)
              for name, protocol in protocols.items()}
  if all(entry is not None for entry in recorded.values()):
    return {name: entry.statistics for name, entry in recorded.items()}
  path = translation_train.translations_path(run_dir, split, data.target_lang, checkpoint)
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{run_dir}: neither {bleu.STATISTICS_FILE} nor translations ({path}) for the '
                            f'{checkpoint} checkpoint on {split}')
  hypotheses = translation_train.read_translations(path, len(references()))
  if save:
    return bleu.record_statistics(run_dir, checkpoint, split, hypotheses, references(), data)
  return {name: protocol.sentence_statistics(hypotheses, references()) for name, protocol in protocols.items()}


def compare(systems: Sequence[str], data_dir: str | None = None, test: str = 'bootstrap', samples: int = 0,
            save_statistics: bool = False) -> dict:
  """Every test split's scores and paired tests against `systems[0]`, with the test's signatures.

  References, needed only for systems without recorded statistics, are read from `data_dir`, by
  default the baseline's own `config.data.data_dir`.
  """
  if len(systems) < 2:
    raise ValueError(f'a paired test needs a baseline and at least one system; got {list(systems)}')
  bleu.check_paired_test(test, samples)
  parsed = [parse_system(spec) for spec in systems]
  datas = {spec: read_run_data(run_dir) for spec, (run_dir, _) in zip(systems, parsed)}
  check_comparable(datas)
  data = read_run_data(parsed[0][0], data_dir)
  protocols = bleu.protocols(data)
  splits = {}
  for split in data.test_splits:
    references = functools.cache(lambda split=split: translation_train.read_text(data, split).targets)
    statistics = [system_statistics(run_dir, checkpoint, split, data, references, save_statistics)
                  for run_dir, checkpoint in parsed]
    sentences = len(statistics[0]['bleu'])
    for spec, system in zip(systems, statistics):
      if len(system['bleu']) != sentences:
        raise ValueError(f'{spec}: {len(system["bleu"])} sentences of {split}; {systems[0]} has {sentences}')
    splits[split] = {}
    for name, protocol in protocols.items():
      results = bleu.paired_test(protocol, [system[name] for system in statistics], test, samples)
      splits[split][name] = {
          'signature': bleu.paired_signature(protocol, test, samples),
          'systems': [{'system': spec} | result._asdict() for spec, result in zip(systems, results)]}
  return {'baseline': systems[0], 'test': test, 'splits': splits}


def markdown(report: dict) -> str:
  """One table per test split and BLEU: score, bootstrap mean ± 95% interval, p against the baseline."""
  def interval(row: dict) -> str:
    return 'n/a' if row['mean'] is None else f"{row['mean']:.2f} ± {row['ci95']:.2f}"

  lines = [f"Baseline: {report['baseline']}; paired {report['test']} test.", '']
  for split, by_name in report['splits'].items():
    for name, table in by_name.items():
      lines += [f"{split}, {name} (`{table['signature']}`):", '',
                '| system | score | mean ± 95% | p |', '| --- | --- | --- | --- |']
      lines += [f"| {row['system']} | {row['score']:.2f} | {interval(row)} | "
                f"{'n/a' if row['p_value'] is None else format(row['p_value'], '.4f')} |" for row in table['systems']]
      lines.append('')
  return '\n'.join(lines)


class PooledStatistics(NamedTuple):
  """One encoding's sentence statistics summed over its seeds' runs (the corpus of all their translations: a
  paired bootstrap resamples each sentence with every seed's translation of it), their BLEU, and those seeds."""
  protocol: bleu.BleuProtocol
  statistics: np.ndarray
  seeds: list[int]


def pooled_statistics(runs: Sequence[tuple[str, int]], checkpoint: str, split: str, name: str
                      ) -> PooledStatistics | None:
  """The BLEU `name`'s sentence statistics of `checkpoint` on `split`, summed over the (run_dir, seed) `runs` that
  recorded them in bleu_statistics.json; None if none did. Runs scored with different BLEUs are an error."""
  pooled = None
  for run_dir, seed in runs:
    if not os.path.isfile(bleu.statistics_path(run_dir)):
      continue
    protocol = bleu.protocols(read_run_data(run_dir))[name]
    recorded = bleu.read_statistics(run_dir, checkpoint, split, name, protocol)
    if recorded is None:
      continue
    if pooled is None:
      pooled = PooledStatistics(protocol, recorded.statistics, [seed])
    else:
      check_same_bleu(protocol, pooled.protocol, f"{run_dir} pooled with its encoding's other seeds")
      pooled = PooledStatistics(protocol, pooled.statistics + recorded.statistics, pooled.seeds + [seed])
  return pooled


def pooled_bootstrap_p(reference: PooledStatistics, other: PooledStatistics, what: str) -> float:
  """The two-sided paired bootstrap p of `other`'s pooled BLEU against `reference`'s (`bleu.two_sided_bootstrap`)."""
  check_same_bleu(other.protocol, reference.protocol, what)
  return bleu.two_sided_bootstrap(other.protocol, reference.statistics, other.statistics)


def check_same_bleu(protocol: bleu.BleuProtocol, other: bleu.BleuProtocol, what: str) -> None:
  """Sentence statistics of two BLEU protocols do not pool or pair: raise naming where they met."""
  if bleu.without_version(protocol.signature()) != bleu.without_version(other.signature()):
    raise ValueError(f'{what}: BLEU {protocol.signature()} and {other.signature()} differ; '
                     'statistics of different protocols neither pool nor pair')


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('systems', nargs='+', help='RUN_DIR[:best|averaged], the baseline first.')
  parser.add_argument('--data_dir', help="Where the references are, for runs scored from their translations "
                      "(default: the baseline config's data.data_dir).")
  parser.add_argument('--test', choices=sorted(bleu.PAIRED_TESTS), default='bootstrap')
  parser.add_argument('--samples', type=int, default=0,
                      help="Resamples or trials (0: sacreBLEU's defaults, 1000 and 10000).")
  parser.add_argument('--save_statistics', action='store_true',
                      help="Add the statistics of runs scored from their translations to their bleu_statistics.json.")
  parser.add_argument('--output', help='Where to write the report as JSON (default: print only).')
  args = parser.parse_args(argv)
  report = compare(args.systems, args.data_dir, args.test, args.samples, args.save_statistics)
  if args.output:
    with written_whole(args.output) as f:
      json.dump(report, f, indent=2)
  print(markdown(report))


if __name__ == '__main__':
  main()
