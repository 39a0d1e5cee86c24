"""The studies of the results summary, each declared by a `study.toml` beside its runs under results/.

A study file names its task and its tables; it is data, read and checked here once into `SummaryTable`s, whose
fields are its schema:

    task = "listops"

    [[tables]]
    position = 1                        # the table's number in the summary (tables are ordered by it)
    title = "ListOps at convergence"
    question = "a bidirectional encoder, within the training lengths"   # README's "Which encoding" groups by it
    setting = "test accuracy of the best-validation checkpoint; ..."
    sources = ["listops_plateau/runs"]  # under results/: VARIANT/seed_S run folders, or a runs.csv
    metric = "test accuracy"            # the column ranked and tested (a row `sweep.run_row` writes)
    axis = "test accuracy"
    columns = [["test accuracy", "test accuracy"]]   # (column, header), shown as mean ± std
    digits = 3
    reference = "sinusoidal"
    # Optional: lower_is_better = true; baseline = [column, label]; statistics = [checkpoint, split, score] for
    # the task's paired test; rank_also_at = a column whose order the verdict compares with the metric's.

A task folder says what the task is (data, model, metrics, how its runs are scored); which studies exist, their
tables and their statistics are declared here, so a new study is a folder of runs and one file. To check the
study files, and see the tables they declare in order:

    python -m lra_posenc.studies.study_files [--results_dir=results]
"""
import argparse
import dataclasses
import os
import tomllib
import typing
from collections.abc import Sequence

from lra_posenc import tasks

STUDY_FILE = 'study.toml'


@dataclasses.dataclass(frozen=True)
class SummaryTable:
  """One table of the results summary (see the module's docstring for each key).

  Attributes:
    task: the task whose runs the table reads (`tasks.find`: a task folder's, or a module's outside the package).
    position: its number in the summary.
    title, question, setting: what it is, the question it answers, and how its runs were trained and scored.
    sources: folders of run folders, or runs.csv files, under results/.
    metric: the column ranked and tested; a run without it is left out and named in the heading.
    axis: the metric's label in the figure.
    columns: (column, header) pairs shown as mean ± std.
    digits: decimals of its figures.
    reference: the encoding every other is compared with.
    lower_is_better: whether the metric ranks ascending (a loss).
    baseline: (column, label) whose mean the heading quotes, or None.
    statistics: (checkpoint, split, score) for the task's paired test over test examples, or None.
    rank_also_at: a column (the fit at the training length) whose order the verdict compares with the metric's.
  """
  task: str
  position: int
  title: str
  question: str
  setting: str
  sources: tuple[str, ...]
  metric: str
  axis: str
  columns: tuple[tuple[str, str], ...]
  digits: int
  reference: str
  lower_is_better: bool = False
  baseline: tuple[str, str] | None = None
  statistics: tuple[str, str, str] | None = None
  rank_also_at: str | None = None


# Each key's type as the file gives it: a TOML string, integer, boolean, or array of strings (of a fixed length,
# or of pairs).
_KINDS = {'position': int, 'digits': int, 'lower_is_better': bool, 'sources': 'strings', 'columns': 'pairs',
          'baseline': 2, 'statistics': 3}
_REQUIRED = tuple(field.name for field in dataclasses.fields(SummaryTable)
                  if field.default is dataclasses.MISSING and field.name != 'task')
_OPTIONAL = tuple(field.name for field in dataclasses.fields(SummaryTable)
                  if field.default is not dataclasses.MISSING)


class StudyFileError(ValueError):
  """A study file that does not read as the schema says, naming the file, the table and the key."""


def _strings(value: typing.Any, length: int | None = None) -> bool:
  return (isinstance(value, list) and all(isinstance(item, str) for item in value)
          and (len(value) == length if length else bool(value)))


def _checked(key: str, value: typing.Any, where: str) -> typing.Any:
  """The value of `key` as SummaryTable holds it (arrays as tuples), or StudyFileError saying what it should be."""
  kind = _KINDS.get(key, str)
  if kind is int and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
    return value
  if kind is bool and isinstance(value, bool) or kind is str and isinstance(value, str) and value:
    return value
  if kind == 'strings' and _strings(value):
    return tuple(value)
  if kind == 'pairs' and isinstance(value, list) and value and all(_strings(pair, 2) for pair in value):
    return tuple(tuple(pair) for pair in value)
  if isinstance(kind, int) and not isinstance(kind, bool) and _strings(value, kind):
    return tuple(value)
  wanted = {int: 'an integer >= 0', bool: 'true or false', str: 'a non-empty string',
            'strings': 'a non-empty array of strings', 'pairs': 'a non-empty array of [column, header] pairs'}
  raise StudyFileError(f'{where}: {key} = {value!r} should be '
                       f'{wanted.get(kind) or f"an array of {kind} strings"}')


def read_study(path: str, results_dir: str) -> list[SummaryTable]:
  """The tables one study file declares, every key checked; sources must exist under `results_dir`."""
  try:
    with open(path, 'rb') as f:
      study = tomllib.load(f)
  except tomllib.TOMLDecodeError as error:
    raise StudyFileError(f'{path}: {error}') from None
  if unknown := sorted(set(study) - {'task', 'tables'}):
    raise StudyFileError(f'{path}: unknown key {unknown[0]!r}; a study file has task and [[tables]]')
  if not isinstance(study.get('task'), str):
    raise StudyFileError(f"{path}: task = {study.get('task')!r} should be a task's name ({', '.join(tasks.TASKS)})")
  try:
    tasks.find(study['task'])
  except ValueError as error:
    raise StudyFileError(f'{path}: {error}') from None
  if not isinstance(study.get('tables'), list) or not study['tables'] or not all(
      isinstance(table, dict) for table in study['tables']):
    raise StudyFileError(f'{path}: no [[tables]], or tables that are not [[tables]] sections')
  tables = []
  for number, table in enumerate(study['tables'], 1):
    where = f'{path}: table {number}'
    if unknown := sorted(set(table) - set(_REQUIRED) - set(_OPTIONAL)):
      raise StudyFileError(f"{where}: unknown key {unknown[0]!r}; valid: {', '.join(_REQUIRED + _OPTIONAL)}")
    if missing := [key for key in _REQUIRED if key not in table]:
      raise StudyFileError(f'{where}: {missing[0]} is missing')
    read = SummaryTable(task=study['task'], **{key: _checked(key, value, where) for key, value in table.items()})
    for source in read.sources:
      if not os.path.exists(os.path.join(results_dir, source)):
        raise StudyFileError(f'{where}: source {source!r} is not under {results_dir}')
    tables.append(read)
  return tables


def read_tables(results_dir: str) -> tuple[SummaryTable, ...]:
  """Every study file's tables (results_dir/*/study.toml), in the order of their positions, which are unique."""
  if not os.path.isdir(results_dir):
    raise StudyFileError(f'{results_dir}: no such folder')
  tables = []
  for folder in sorted(os.listdir(results_dir)):
    path = os.path.join(results_dir, folder, STUDY_FILE)
    if os.path.isfile(path):
      tables += [(table, path) for table in read_study(path, results_dir)]
  if not tables:
    raise StudyFileError(f'{results_dir}: no {STUDY_FILE} in any of its folders')
  seen: dict[int, str] = {}
  for table, path in tables:
    if table.position in seen:
      raise StudyFileError(f'{path}: position {table.position} is also {seen[table.position]}')
    seen[table.position] = f'{table.title!r} in {path}'
  return tuple(table for table, _ in sorted(tables, key=lambda pair: pair[0].position))


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description='Checks every results/*/study.toml and lists the tables they declare.')
  parser.add_argument('--results_dir', default='results', help='The committed results tree.')
  args = parser.parse_args(argv)
  try:
    tables = read_tables(args.results_dir)
  except StudyFileError as error:
    parser.exit(2, f'error: {error}\n')
  for table in tables:
    print(f"{table.position}. {table.title} ({table.task}; {', '.join(table.sources)}; "
          f"{table.metric}, reference {table.reference})")


if __name__ == '__main__':
  main()
