"""Reading text data files so that every problem is reported with its file and line."""
import gzip
import os


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
  """Every line of a UTF-8 text file, gzip-compressed where its name ends in .gz."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{path}: no such file')
  opener = gzip.open if path.endswith('.gz') else open
  try:
    with opener(path, 'rb') as f:
      return [decode_line(path, number, raw) for number, raw in enumerate(f, start=1)]
  except (gzip.BadGzipFile, EOFError) as error:
    raise DataError(path, 0, f'corrupt gzip file: {error}') from None
