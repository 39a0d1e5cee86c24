"""Reading text data files so that every problem is reported with its file and line; writing files whole."""
import contextlib
import csv
import gzip
import os
import secrets
from collections.abc import Callable, Iterator
from typing import IO


class DataError(ValueError):
  """A problem in an input file, located by path and line."""

  def __init__(self, path: str, line: int, message: str):
    super().__init__(f'{path}:{line}: {message}')


@contextlib.contextmanager
def written_whole(path: str, mode: str = 'w', **open_options) -> Iterator[IO]:
  """A file to write `path`'s new content to, which replaces `path` only once the block ends without an error
  and the content is on disk: a reader never sees a half-written file, even after a host crash, and concurrent
  writers never share a temporary file. The file gets the permissions `open` would give it (the umask's), not
  the owner-only ones of `tempfile.mkstemp`."""
  directory, name = os.path.split(os.path.abspath(path))
  temporary = os.path.join(directory, f'.{name}.{secrets.token_hex(8)}.tmp')
  descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
  try:
    with os.fdopen(descriptor, mode, **open_options) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.replace(temporary, path)
  except BaseException:
    os.remove(temporary)
    raise


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


def read_csv_figures(path: str, figure_columns: Callable[[str], bool]) -> list[dict]:
  """A CSV's rows, the columns `figure_columns` picks as floats (an empty cell: None, a figure not recorded),
  the rest as text; a figure that is not a number is a DataError naming its line and column."""
  rows = []
  with open(path, newline='') as f:
    reader = csv.DictReader(f)
    for row in reader:
      if None in row or None in row.values():  # Cells beyond the header's, or fewer than it has.
        cells = sum(text is not None for column, text in row.items() if column is not None) + len(row.get(None, []))
        raise DataError(path, reader.line_num, f'{cells} columns where the header has {len(reader.fieldnames)}')
      for column in filter(figure_columns, reader.fieldnames):
        try:
          row[column] = float(row[column]) if row[column] else None
        except ValueError:
          raise DataError(path, reader.line_num, f'column {column!r}: {row[column]!r} is not a number') from None
      rows.append(row)
  return rows
