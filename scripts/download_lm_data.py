#!/usr/bin/env python3
"""Downloads enwik8 or text8 where a network exists and writes their standard splits for language modelling.

    python scripts/download_lm_data.py --corpus=enwik8 --output_dir=data/enwik8
    python -m lra_posenc.lm.train --config=configs/lm/shakespeare_char.py --workdir=runs/enwik8 \\
        --config.data.data_dir=data/enwik8 --config.data.level=byte

Source: Matt Mahoney's Large Text Compression Benchmark (mattmahoney.net/dc): enwik8.zip holds the first
10^8 bytes of an English Wikipedia dump, text8.zip the same text lowercased to a-z and spaces. The standard
splits (Al-Rfou et al. 2019; Dai et al. 2019): the first 90M bytes (characters) train, the next 5M validate,
the last 5M test; written as train.txt, valid.txt and test.txt, as `data.data_dir` reads them. enwik8 is
modelled at byte level (`data.level=byte`; its cuts may split a UTF-8 character), text8 at either.
--archive reads a zip already on disk instead of downloading. The corpus's size is checked before anything
is written.
"""
import argparse
import os
import sys
import urllib.request
import zipfile
from collections.abc import Sequence

from lra_posenc.data.files import written_whole

# Corpus -> (where its zip is served, the member holding it, its size in bytes).
CORPORA = {'enwik8': ('http://mattmahoney.net/dc/enwik8.zip', 'enwik8', 100_000_000),
           'text8': ('http://mattmahoney.net/dc/text8.zip', 'text8', 100_000_000)}
HELD_OUT = 5_000_000  # Bytes in each of the validation and test splits.
DOWNLOAD_TIMEOUT_SECONDS = 600


def read_corpus(archive: str, member: str, size: int) -> bytes:
  """The bytes of `member` in the zip `archive`, refused unless there are `size` of them."""
  try:
    with zipfile.ZipFile(archive) as zipped:
      data = zipped.read(member)
  except (zipfile.BadZipFile, KeyError) as error:
    raise ValueError(f'{archive}: not a zip holding {member!r} ({error})') from None
  if len(data) != size:
    raise ValueError(f'{archive}: {member} holds {len(data)} bytes, but the standard corpus has {size}')
  return data


def write_splits(data: bytes, output_dir: str, held_out: int = HELD_OUT) -> dict[str, int]:
  """train.txt (all but the last 2 x `held_out` bytes), valid.txt and test.txt (`held_out` each) in
  `output_dir`; returns each file's size."""
  if len(data) <= 2 * held_out:
    raise ValueError(f'{len(data)} bytes leave nothing to train on after 2 x {held_out} held out')
  os.makedirs(output_dir, exist_ok=True)
  cut = len(data) - 2 * held_out
  splits = {'train.txt': data[:cut], 'valid.txt': data[cut:cut + held_out], 'test.txt': data[cut + held_out:]}
  for name, content in splits.items():
    with written_whole(os.path.join(output_dir, name), 'wb') as f:
      f.write(content)
  return {name: len(content) for name, content in splits.items()}


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--corpus', required=True, choices=sorted(CORPORA))
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--archive', help='A zip of the corpus already on disk (default: download it into OUTPUT_DIR).')
  args = parser.parse_args(argv)
  url, member, size = CORPORA[args.corpus]
  archive = args.archive or os.path.join(args.output_dir, os.path.basename(url))
  if not os.path.exists(archive):
    os.makedirs(args.output_dir, exist_ok=True)
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response, \
        written_whole(archive, 'wb') as f:
      f.write(response.read())
  sizes = write_splits(read_corpus(archive, member, size), args.output_dir)
  print(f'{args.corpus} into {args.output_dir}: ' + ', '.join(f'{name} {count} bytes' for name, count in sizes.items()),
        file=sys.stderr)


if __name__ == '__main__':
  main()
