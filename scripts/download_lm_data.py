#!/usr/bin/env python3
"""Fetches a language-modelling corpus where a network exists and writes it as the LM task reads it.

    python scripts/download_lm_data.py --corpus=tinyshakespeare --output_dir=data/tinyshakespeare
    python -m lra_posenc.lm.train --config=configs/lm/shakespeare_char.py:cpu --workdir=runs/lm_cpu \\
        --config.data.text_file=data/tinyshakespeare/input.txt
    python scripts/download_lm_data.py --corpus=enwik8 --output_dir=data/enwik8
    python -m lra_posenc.lm.train --config=configs/lm/shakespeare_char.py --workdir=runs/enwik8 \\
        --config.data.data_dir=data/enwik8 --config.data.level=byte

One text file, read with `data.text_file` (its last 10% validates, as nanoGPT cuts it), checked by its MD5:
  tinyshakespeare  Karpathy's char-rnn corpus, the one nanoGPT's shakespeare_char/prepare.py downloads
                   (1,115,394 characters), fetched from char-rnn's repository;
  warpeace         Tolstoy's War and Peace in English (Project Gutenberg, public domain), char-rnn's second corpus
                   (3,196,211 characters), not served by char-rnn's repository: give a copy with --source, e.g.
                   `warpeace_input.txt` of the public MrHereward/machine_learning_sandbox repository.
Standard splits, read with `data.data_dir`: Matt Mahoney's Large Text Compression Benchmark (mattmahoney.net/dc):
enwik8.zip holds the first 10^8 bytes of an English Wikipedia dump, text8.zip the same text lowercased to a-z and
spaces. The standard splits (Al-Rfou et al. 2019; Dai et al. 2019): the first 90M bytes (characters) train, the
next 5M validate, the last 5M test; written as train.txt, valid.txt and test.txt. enwik8 is modelled at byte level
(`data.level=byte`; its cuts may split a UTF-8 character), text8 at either.
--source reads the file (a text, or the zip) from disk instead of downloading. The corpus is checked before anything
is written.
"""
import argparse
import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence

from lra_posenc.data.files import written_whole

# Corpus -> (where its zip is served, the member holding it, its size in bytes).
CORPORA = {'enwik8': ('http://mattmahoney.net/dc/enwik8.zip', 'enwik8', 100_000_000),
           'text8': ('http://mattmahoney.net/dc/text8.zip', 'text8', 100_000_000)}
# Corpus -> (where its text is served, or None: from --source only; its MD5), written as OUTPUT_DIR/input.txt.
TEXTS = {'tinyshakespeare': ('https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/'
                             'input.txt', '6fb458f1232090904fb40fe944165e91'),
         'warpeace': (None, '27365183c33bc968ba87e9b6619d1804')}
TEXT_FILE = 'input.txt'

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


def checked_text(data: bytes, md5: str, where: str) -> bytes:
  """`data` if its MD5 is `md5`; a ValueError naming `where` otherwise."""
  digest = hashlib.md5(data).hexdigest()
  if digest != md5:
    raise ValueError(f'{where}: MD5 {digest}, but the corpus has {md5}: another text, or a damaged copy')
  return data


def download(url: str, path: str) -> None:
  """`url` into `path` whole; where it cannot be fetched, one line naming the address and --source (--archive)."""
  try:
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response:
      data = response.read()
  except (OSError, http.client.HTTPException) as error:  # No network, a timeout, a reset, a cut-off body, HTTP 404.
    detail = error if isinstance(error, urllib.error.HTTPError) else getattr(error, 'reason', error)
    raise SystemExit(f'error: could not download {url} ({detail}); fetch it where a network reaches it and give '
                     'the file with --source (or --archive)') from None
  with written_whole(path, 'wb') as f:
    f.write(data)


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--corpus', required=True, choices=sorted(CORPORA) + sorted(TEXTS))
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--source', '--archive', dest='source',
                      help='The corpus (its text, or its zip) already on disk (default: download it).')
  args = parser.parse_args(argv)
  os.makedirs(args.output_dir, exist_ok=True)
  if args.corpus in TEXTS:
    url, md5 = TEXTS[args.corpus]
    if args.source is None and url is None:
      parser.error(f'--corpus={args.corpus} is not served where this script can fetch it; give a copy with '
                   '--source (see --help for where it comes from)')
    source = args.source or os.path.join(args.output_dir, TEXT_FILE + '.download')
    if args.source is None:
      download(url, source)
    with open(source, 'rb') as f:
      data = checked_text(f.read(), md5, source)
    with written_whole(os.path.join(args.output_dir, TEXT_FILE), 'wb') as f:
      f.write(data)
    if args.source is None:
      os.remove(source)
    print(f'{args.corpus} into {os.path.join(args.output_dir, TEXT_FILE)}: {len(data)} bytes', file=sys.stderr)
    return
  url, member, size = CORPORA[args.corpus]
  archive = args.source or os.path.join(args.output_dir, os.path.basename(url))
  if not os.path.exists(archive):
    download(url, archive)
  sizes = write_splits(read_corpus(archive, member, size), args.output_dir)
  print(f'{args.corpus} into {args.output_dir}: ' + ', '.join(f'{name} {count} bytes' for name, count in sizes.items()),
        file=sys.stderr)


if __name__ == '__main__':
  main()
