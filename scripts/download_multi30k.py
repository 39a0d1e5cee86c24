#!/usr/bin/env python3
"""Downloads the Multi30k task-1 raw files (Elliott et al. 2016) where a network exists.

    python scripts/download_multi30k.py --output_dir data/multi30k

Source: the multi30k/dataset GitHub repository, data/task1/raw/SPLIT.LANG.gz. Files that
are already present are kept; every file's line count is checked against the release.
"""
import argparse
import gzip
import os
import sys
import urllib.request
from collections.abc import Sequence

from lra_posenc.data.files import written_whole

BASE_URL = 'https://github.com/multi30k/dataset/raw/master/data/task1/raw'
SPLIT_SIZES = {'train': 29000, 'val': 1014, 'test_2016_flickr': 1000, 'test_2017_flickr': 1000,
               'test_2017_mscoco': 461, 'test_2018_flickr': 1071}
LANGUAGES = ('en', 'de', 'fr')
DOWNLOAD_TIMEOUT_SECONDS = 120  # Per file: a stalled connection fails instead of hanging.


def download(output_dir: str, *, base_url: str = BASE_URL, languages: Sequence[str] = LANGUAGES) -> list[str]:
  """Fetches missing files into `output_dir`; returns the paths fetched. Raises on a wrong line count, before a
  fetched file is written: a bad download (an error page, a cut transfer) is never kept for the next run."""
  os.makedirs(output_dir, exist_ok=True)
  fetched = []
  for split, size in SPLIT_SIZES.items():
    for lang in languages:
      name = f'{split}.{lang}.gz'
      path = os.path.join(output_dir, name)
      if os.path.exists(path):
        with open(path, 'rb') as f:
          check_line_count(path, f.read(), size)
        continue
      url = f'{base_url}/{name}'
      with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response:
        content = response.read()
      check_line_count(url, content, size)
      with written_whole(path, 'wb') as f:
        f.write(content)
      fetched.append(path)
  return fetched


def check_line_count(where: str, content: bytes, size: int) -> None:
  """Raises ValueError unless `content` is gzip-compressed UTF-8 text of `size` lines."""
  try:
    text = gzip.decompress(content).decode('utf-8')
  except (OSError, EOFError, UnicodeDecodeError) as error:
    raise ValueError(f'{where}: not gzip-compressed UTF-8 text ({error})') from None
  lines = text.count('\n') + (bool(text) and not text.endswith('\n'))
  if lines != size:
    raise ValueError(f'{where}: {lines} lines, but the Multi30k release has {size}')


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--base_url', default=BASE_URL, help='Where SPLIT.LANG.gz files are served (file:// works).')
  parser.add_argument('--languages', nargs='+', default=list(LANGUAGES))
  args = parser.parse_args(argv)
  fetched = download(args.output_dir, base_url=args.base_url, languages=args.languages)
  print(f'{len(fetched)} files fetched into {args.output_dir}; all line counts match the release', file=sys.stderr)


if __name__ == '__main__':
  main()
