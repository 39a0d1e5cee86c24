#!/usr/bin/env python3
"""Paired significance of BLEU differences between translation runs, from the test translations they saved.

    python scripts/bleu_significance.py --data_dir=../shared/data/multi30k \\
        runs/m30tiny_sinusoidal_s0 runs/m30tiny_rope_s0 runs/m30tiny_rope_s0:averaged

A system is a run directory (a workdir, or a copy of its config.json and translations/) and the
checkpoint whose translations to read: `best` (translations/SPLIT.LANG, the default) or `averaged`
(translations/averaged/SPLIT.LANG). The first system is the baseline.
For every test split of the runs and both BLEUs the trainer reports (sacreBLEU and the tokenized
lowercased BLEU), sacreBLEU's paired test compares each system with the baseline on the same
sentences: paired bootstrap resampling (Koehn 2004; `--test=bootstrap`, 1000 resamples) or
approximate randomization (`--test=randomization`, 10000 trials), with sacreBLEU's fixed seed.
Each row gives the system's BLEU, the bootstrap mean and 95% interval (bootstrap only) and the
p-value of its difference from the baseline. A system that scores exactly the baseline's BLEU gets
p = 1: sacreBLEU counts resampled differences larger than the observed one, so for two systems whose
sentences score alike (the same translations, or ones differing only in what the BLEU ignores, such
as case in a lowercased BLEU) it would report its smallest p-value for a difference of 0.

What this measures is the test set's sampling noise for fixed models. It says nothing of the
spread between training seeds: a difference significant over test sentences can still be within
seed-to-seed variation, which only more seeds measure.
"""
import argparse
import json
import os
import sys
from collections.abc import Sequence

import sacrebleu.significance

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lra_posenc.training.checkpointing import read_config  # noqa: E402
from lra_posenc.translation import train as translation_train  # noqa: E402

CHECKPOINTS = ('best', 'averaged')
TESTS = {'bootstrap': 'bs', 'randomization': 'ar'}
# Settings of `config.data` that must agree across the systems for their scores to be comparable.
SHARED_DATA_KEYS = ('tfds_name', 'source_lang', 'target_lang', 'test_splits', 'tokenizer.lowercase')


def parse_system(spec: str) -> tuple[str, str]:
  """`RUN_DIR[:CHECKPOINT]` as (run directory, checkpoint)."""
  run_dir, _, checkpoint = spec.partition(':')
  checkpoint = checkpoint or 'best'
  if checkpoint not in CHECKPOINTS:
    raise ValueError(f'{spec}: checkpoint {checkpoint!r}; valid: {list(CHECKPOINTS)}')
  return run_dir, checkpoint


def check_comparable(data_configs: dict[str, dict]) -> None:
  """Raises, naming the setting, if the systems' data settings differ where their scores depend on it."""
  def value(config: dict, key: str):
    for part in key.split('.'):
      config = config[part]
    return config

  first_name, first = next(iter(data_configs.items()))
  for name, config in data_configs.items():
    for key in SHARED_DATA_KEYS:
      if value(config, key) != value(first, key):
        raise ValueError(f'data.{key} is {value(config, key)!r} in {name} but {value(first, key)!r} in '
                         f'{first_name}: their scores are not comparable')


def compare(systems: Sequence[str], data_dir: str | None = None, test: str = 'bootstrap', samples: int = 0) -> dict:
  """Every test split's scores and paired tests against `systems[0]`, with the test's signatures.

  References are read from `data_dir`, by default the baseline's own `config.data.data_dir`.
  """
  if len(systems) < 2:
    raise ValueError(f'a paired test needs a baseline and at least one system; got {list(systems)}')
  if test not in TESTS:
    raise ValueError(f'test {test!r}; valid: {sorted(TESTS)}')
  if samples < 0:
    raise ValueError(f'samples {samples}: the number of resamples or trials, or 0 for sacreBLEU\'s default')
  parsed = [parse_system(spec) for spec in systems]
  data_configs = {spec: read_config(run_dir).data for spec, (run_dir, _) in zip(systems, parsed)}
  check_comparable({spec: data.to_dict() for spec, data in data_configs.items()})
  data = data_configs[systems[0]]
  if data_dir is not None:
    data.data_dir = data_dir
  protocols = translation_train.bleu_protocols(data)
  splits = {}
  for split in data.test_splits:
    references = translation_train.read_text(data, split).targets
    paths = [translation_train.translations_path(run_dir, split, data.target_lang, checkpoint)
             for run_dir, checkpoint in parsed]
    hypotheses = [translation_train.read_translations(path, len(references)) for path in paths]
    splits[split] = {}
    for name, protocol in protocols.items():
      signatures, results = sacrebleu.significance.PairedTest(
          [(spec, protocol.prepare(lines)) for spec, lines in zip(systems, hypotheses)], {name: protocol.metric},
          [protocol.prepare(references)], test_type=TESTS[test], n_samples=samples)()
      (metric_name,) = signatures  # sacreBLEU's name for the one metric tested.
      baseline = results[metric_name][0]
      splits[split][name] = {
          'signature': protocol.signature(signatures[metric_name]),
          'systems': [{'system': spec, 'score': result.score, 'mean': result.mean, 'ci95': result.ci,
                       'p_value': 1.0 if result is not baseline and result.score == baseline.score else result.p_value}
                      for spec, result in zip(systems, results[metric_name])]}
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


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('systems', nargs='+', help='RUN_DIR[:best|averaged], the baseline first.')
  parser.add_argument('--data_dir', help="Where the references are (default: the baseline config's data.data_dir).")
  parser.add_argument('--test', choices=sorted(TESTS), default='bootstrap')
  parser.add_argument('--samples', type=int, default=0,
                      help="Resamples or trials (0: sacreBLEU's defaults, 1000 and 10000).")
  parser.add_argument('--output', help='Where to write the report as JSON (default: print only).')
  args = parser.parse_args(argv)
  report = compare(args.systems, args.data_dir, args.test, args.samples)
  if args.output:
    with open(args.output, 'w') as f:
      json.dump(report, f, indent=2)
  print(markdown(report))


if __name__ == '__main__':
  main()
