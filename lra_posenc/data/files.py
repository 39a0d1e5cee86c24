"""Reading text data files so that every problem is reported with its file and line."""
import gzip
import os

GZIP_MAGIC = b'\x1f\x8b'


class DataError(ValueError):
  """A problem in an input file, located by path and line."""

  def __init__(self, path: str, line: int, message: str):
    super().__init__(f'{path}:{line}: {message}')


def decode_line(path: str, line_number: int, raw: bytes) -> str:
  """The UTF-8 text of one line without its line ending; invalid UTF-8 is a DataError."""
  try:
    return raw.decode('utf-8').rstrip('\r\n')
  except UnicodeDecodeError as error:
    raise DataError(path, line_number, f'invalid UTF-8 at byte {error.start}') from None


def read_lines(path: str) -> list[str]:
  """Every line of a plain or gzip-compressed (detected by content) UTF-8 text file."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{path}: no such file')
  with open(path, 'rb') as f:
    compressed = f.read(2) == GZIP_MAGIC
  opener = gzip.open if compressed else open
  try:
    with opener(path, 'rb') as f:
      return [decode_line(path, number, raw) for number, raw in enumerate(f, start=1)]
  except (gzip.BadGzipFile, EOFError) as error:
    raise DataError(path, 0, f'corrupt gzip file: {error}') from None
