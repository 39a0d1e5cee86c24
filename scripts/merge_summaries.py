#!/usr/bin/env python3
"""One table from several summaries of `scripts/length_generalisation.py` (by length, by depth, other sweeps).

    python scripts/merge_summaries.py results/listops_3000_steps/sweeps/listops_cpu/length_generalisation/summary.json \\
        results/listops_3000_steps/sweeps/listops_old_depth/depth/summary.json ... --report_dir=results/listops_3000_steps

A study's encodings are often spread over sweeps trained in different sessions, each with its
own length and depth reports. The merged table has a row per variant (in order of first
appearance) and a column per bucket (the union, in order of first appearance); each cell comes
from the first summary that scores that variant in that bucket, and a list under the table
names the summaries each row drew on. Where two summaries share a bucket, their majority
classes must agree (the same evaluation set), or the merge refuses, naming the bucket.
"""
import argparse
import json
import os
from collections.abc import Sequence

from lra_posenc.data.files import written_whole
from lra_posenc.sweeps import length_table, merge_length_summaries


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('summaries', nargs='+', help='summary.json files of scripts/length_generalisation.py.')
  parser.add_argument('--variants', help='Comma-separated variants to keep, in this order (default: all).')
  parser.add_argument('--digits', type=int, default=3)
  parser.add_argument('--report_dir', required=True, help='Where summary.json and summary.md go.')
  args = parser.parse_args(argv)
  summaries = {}
  for path in args.summaries:
    with open(path) as f:
      summaries[os.path.dirname(os.path.normpath(path))] = json.load(f)
  merged = merge_length_summaries(summaries, args.variants.split(',') if args.variants else None)
  table = length_table(merged['variants'], merged['buckets'], merged['majority_class'] or None, args.digits)
  table += '\nCells from:\n' + ''.join(f"- {variant}: {', '.join(names)}\n"
                                       for variant, names in merged['sources'].items())
  os.makedirs(args.report_dir, exist_ok=True)
  with written_whole(os.path.join(args.report_dir, 'summary.json')) as f:
    json.dump(merged, f, indent=2)
  with written_whole(os.path.join(args.report_dir, 'summary.md')) as f:
    f.write(table)
  print(table, end='')


if __name__ == '__main__':
  main()
