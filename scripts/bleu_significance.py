#!/usr/bin/env python3
"""Paired significance of BLEU differences between translation runs, from their sentence statistics.

    python scripts/bleu_significance.py results/multi30k_tiny/runs/sinusoidal/seed_1 \\
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
import json
from collections.abc import Sequence

from lra_posenc.data.files import written_whole
from lra_posenc.translation import bleu
from lra_posenc.translation.significance import compare, markdown


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
