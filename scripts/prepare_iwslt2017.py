#!/usr/bin/env python3
"""Writes IWSLT 2017's TED talks for one bilingual pair (Fr-En by default) as SPLIT.LANG files for translation.

    python scripts/prepare_iwslt2017.py --archive=fr-en.tgz --output_dir=data/iwslt2017_fr_en
    python -m lra_posenc.translation.train --config=configs/translation/multi30k.py --workdir=runs/iwslt_fr_en \\
        --config.data.data_dir=data/iwslt2017_fr_en --config.data.source_lang=fr --config.data.target_lang=en \\
        --config.data.validation_split=dev2010 --config.data.test_splits="('tst2015','tst2014','tst2013')"

Source: the WIT3 release of the IWSLT 2017 evaluation campaign (Cettolo et al. 2012), archive
2017-01-trnted/texts/fr/en/fr-en.tgz (wit3.fbk.eu, and the hlt-mt/WIT3 repository's archive folder; the
Hugging Face dataset `iwslt2017`, config `iwslt2017-fr-en`, reads the same archive). This script reads the
archive from disk; nothing is downloaded. Inside: train.tags.fr-en.{fr,en} (one or more sentences per line,
talk metadata on lines starting with '<', which are dropped), IWSLT17.TED.dev2010.fr-en.{fr,en}.xml and
IWSLT17.TED.tst2010 ... tst2015 (one `<seg id="N">` per sentence). Written: train, dev2010 and tst2010 ...
tst2015, each as SPLIT.fr and SPLIT.en, line-aligned. A split whose two sides differ in line count, or a
segment that is not `<seg id="N">...</seg>`, is an error naming the file and line; nothing is written then.
"""
import argparse
import html
import os
import re
import sys
import tarfile
from collections.abc import Sequence

from lra_posenc.data.files import written_whole

SEGMENT = re.compile(r'<seg id="?\s*\d+\s*"?>(.*)</seg>\s*$')
TEST_YEARS = (2010, 2011, 2012, 2013, 2014, 2015)


def training_lines(text: str) -> list[str]:
  """A train.tags file's sentences: every line that is not talk metadata (starting with '<'), stripped."""
  return [line.strip() for line in text.splitlines() if not line.strip().startswith('<')]


def segment_lines(text: str, where: str) -> list[str]:
  """The sentences of an IWSLT XML file, one per `<seg id="N">` line, XML character references resolved, stripped."""
  lines = []
  for number, line in enumerate(text.splitlines(), 1):
    if line.strip().startswith('<seg'):
      match = SEGMENT.match(line.strip())
      if not match:
        raise ValueError(f'{where}:{number}: a segment that is not <seg id="N">...</seg>: {line.strip()[:80]!r}')
      lines.append(html.unescape(match.group(1)).strip())  # XML: &amp; and the like, as the training text has them.
  return lines


def read_splits(archive: str, source: str, target: str) -> dict[str, dict[str, list[str]]]:
  """split -> language -> sentences, from the WIT3 archive of the pair `source`-`target`."""
  pair = f'{source}-{target}'
  wanted = {'train': (f'train.tags.{pair}.{{lang}}', training_lines),
            'dev2010': (f'IWSLT17.TED.dev2010.{pair}.{{lang}}.xml', None),
            **{f'tst{year}': (f'IWSLT17.TED.tst{year}.{pair}.{{lang}}.xml', None) for year in TEST_YEARS}}
  try:
    with tarfile.open(archive) as tar:
      members = {os.path.basename(member.name): member for member in tar.getmembers() if member.isfile()}
      splits = {}
      for split, (pattern, parse) in wanted.items():
        splits[split] = {}
        for lang in (source, target):
          name = pattern.format(lang=lang)
          if name not in members:
            raise ValueError(f'{archive}: no {name}; not the WIT3 archive of {pair}')
          text = tar.extractfile(members[name]).read().decode('utf-8')
          splits[split][lang] = parse(text) if parse else segment_lines(text, f'{archive}:{name}')
        counts = {lang: len(lines) for lang, lines in splits[split].items()}
        if len(set(counts.values())) != 1:
          raise ValueError(f'{archive}: {split} has ' + ' and '.join(f'{n} {lang} lines' for lang, n in counts.items()))
  except tarfile.TarError as error:
    raise ValueError(f'{archive}: not a tar archive ({error})') from None
  return splits


def write_splits(splits: dict[str, dict[str, list[str]]], output_dir: str) -> dict[str, int]:
  """SPLIT.LANG files in `output_dir`; returns each split's sentence count."""
  os.makedirs(output_dir, exist_ok=True)
  for split, sides in splits.items():
    for lang, lines in sides.items():
      with written_whole(os.path.join(output_dir, f'{split}.{lang}'), 'w') as f:
        f.write(''.join(line + '\n' for line in lines))
  return {split: len(next(iter(sides.values()))) for split, sides in splits.items()}


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--archive', required=True, help="WIT3's SOURCE-TARGET.tgz of IWSLT 2017, on disk.")
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--source_lang', default='fr')
  parser.add_argument('--target_lang', default='en')
  args = parser.parse_args(argv)
  try:
    counts = write_splits(read_splits(args.archive, args.source_lang, args.target_lang), args.output_dir)
  except ValueError as error:
    sys.exit(f'error: {error}')
  print(f'IWSLT 2017 {args.source_lang}-{args.target_lang} into {args.output_dir}: '
        + ', '.join(f'{split} {count}' for split, count in counts.items()), file=sys.stderr)


if __name__ == '__main__':
  main()
