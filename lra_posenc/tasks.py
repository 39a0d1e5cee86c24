"""The task registry: what the scripts need of each task, by name.

A task is one folder of this package with a `spec` module whose `SPEC` is its `TaskSpec`: the folder is the
only place that names the task, and this registry finds every such folder. Tasks depend on the shared
machinery (training, models), never the other way; this registry sits above both, for the studies
(`lra_posenc.studies`) and the scripts.
"""
import argparse
import dataclasses
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_collections

import lra_posenc
from lra_posenc.models.transformer import TransformerConfig
from lra_posenc.training.settings import ConfigHistory
from lra_posenc.training.task import Task, Workload

# (workdir, length bucket edges, *, num_samples, data_dir) -> bucket -> {'score', 'examples'[, 'majority']}.
LengthScores = Callable[..., dict[str, dict]]
# (run_dir, length bucket edges, *, checkpoint, bleu_name, data_dir) -> bucket -> {'score', 'examples'}, or None
# for a run that recorded no sentence statistics.
RecordedLengthScores = Callable[..., dict[str, dict] | None]


@dataclasses.dataclass(frozen=True)
class PairedTest:
  """A paired test over the test examples of two encodings' runs, their seeds pooled (translation's paired
  bootstrap of BLEU over sentences), as the results summary's tables apply it.

  Attributes:
    pool: ((run_dir, seed) pairs, checkpoint, split, score) -> what those runs recorded of the checkpoint's
      examples, pooled over the seeds, with `.seeds` (those that recorded it); None where none did.
    p_value: (reference's pooled, another's pooled, what the two are, for an error) -> the two-sided p.
    records: what a run writes for `pool` to read (a file's name), for the summary to say when none did.
  """
  pool: Callable[[Sequence[tuple[str, int]], str, str, str], Any]
  p_value: Callable[[Any, Any, str], float]
  records: str


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """One task, as the studies (sweeps, length studies, benchmarks, the summary) use it: what the task is. Which
  studies exist, and their tables, are declared beside their results (`lra_posenc.studies.study_files`).

  A task needs the first eight fields; the rest are what some studies ask of it, None (or empty) where it has
  none, and a study that needs one it lacks says so.

  Attributes:
    name: `config.task` of its configs, and the key of `TASKS` (a task outside the package: its module's name).
    module: its training program (`python -m MODULE --config=... --workdir=...`).
    create_task: (config, workdir) -> the trainer's Task, data read (or generated).
    read_settings: config -> its typed settings, every section checked and no data read (raises ValueError
      naming the bad key).
    test_metrics: the scores in results.json's test_sets[split] that sweeps tabulate, the headline first.
    validation_metric: the trainer's selection metric, as metrics.jsonl records it.
    validation_label: what that metric is, for axes and titles.
    default_target: a validation score whose first crossing sweeps report.
    test_score_label: what a length study's score is, for axes ('test accuracy'), and `test_score_title` for
      titles; `test_score_digits` its decimals in tables.
    benchmark_workload: config -> the model on synthetic batches of the config's shapes (the benchmarks).
    transformer_of: config (a trained run's, say) -> its Transformer stack, checked, at the positions it serves.
    scores_by_length: a run's best checkpoint scored per length bucket, or None; tasks that draw new test sets
      (`draws_length_sets`) draw `num_samples` per bucket into `data_dir`.
    scores_by_depth: per nesting depth of the run's test split, for tasks whose inputs nest (ListOps); or None.
    scores_by_recorded_length: per bucket of source words, from the sentence statistics a run recorded, for
      tasks that record them (translation); or None.
    recorded_choices: the checkpoints and the scores `scores_by_recorded_length` takes, as two tuples.
    recorded_columns: a run's results.json -> further figures for its row in sweep and summary tables (the
      language model's loss per scored window length), or None.
    paired_test: the paired test over test examples that a study table's `statistics` (checkpoint, split, score)
      names, or None.
    attention_maps: (workdir, an input as text, path) -> draws the run's attention weights for the input into
      path and returns what it drew (ListOps: an expression, its label and the prediction); or None.
    generated_data: (config, folder) -> the command (after the Python executable) that writes the data `config`
      generates into `folder`, keeping a set already there from the same settings, for tasks that generate
      their data (ListOps); or None. A GPU campaign generates such data once for the runs that share it.
    config_history: how its older config.json files read today, as {name: ConfigHistory} (the task's settings'
      CONFIG_HISTORY); `CONFIG_HISTORIES` holds every task's, for reading a run of any task.
  """
  name: str
  module: str
  create_task: Callable[[ml_collections.ConfigDict, str], Task]
  read_settings: Callable[[ml_collections.ConfigDict], object]
  test_metrics: tuple[str, ...]
  validation_metric: str
  validation_label: str
  default_target: float
  test_score_label: str = 'test score'
  test_score_title: str = 'test score'
  test_score_digits: int = 3
  benchmark_workload: Callable[[ml_collections.ConfigDict], Workload] | None = None
  transformer_of: Callable[[ml_collections.ConfigDict], TransformerConfig] | None = None
  scores_by_length: LengthScores | None = None
  draws_length_sets: bool = False
  scores_by_depth: Callable[[str], dict[str, dict]] | None = None
  scores_by_recorded_length: RecordedLengthScores | None = None
  recorded_choices: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
  recorded_columns: Callable[[dict], dict[str, float | None]] | None = None
  paired_test: PairedTest | None = None
  attention_maps: Callable[[str, str, str], dict] | None = None
  generated_data: Callable[[ml_collections.ConfigDict, str], list[str]] | None = None
  config_history: Mapping[str, ConfigHistory] = dataclasses.field(default_factory=dict)

  def needs(self, hook: str, what: str) -> Callable:
    """The hook `hook` (a field), or ValueError saying that this task has none for `what`."""
    if getattr(self, hook) is None:
      raise ValueError(f'task {self.name!r} has no {hook} (TaskSpec.{hook}), which {what} needs')
    return getattr(self, hook)


def _discover() -> dict[str, TaskSpec]:
  """Every task folder's `SPEC`, by name, in the folders' order."""
  specs = {}
  for folder in pkgutil.iter_modules(lra_posenc.__path__):
    if folder.ispkg and importlib.util.find_spec(f'lra_posenc.{folder.name}.spec'):
      spec = importlib.import_module(f'lra_posenc.{folder.name}.spec').SPEC
      if spec.name in specs:
        raise ValueError(f'two task folders register {spec.name!r}: {specs[spec.name].module} and {spec.module}')
      specs[spec.name] = spec
  return specs


TASKS: dict[str, TaskSpec] = _discover()


def find(name: str) -> TaskSpec:
  """The task `name` names: a task folder's (a key of `TASKS`), or one defined outside the package, by the name
  of a module on the Python path whose `SPEC` is named as the module (so that a run's `config.task` finds it
  again, and `python -m` and a study's subprocesses import it from that path). Raises ValueError naming the
  task folders' tasks."""
  if name in TASKS:
    return TASKS[name]
  try:
    spec = getattr(importlib.import_module(name), 'SPEC', None)
  except ImportError as error:
    raise ValueError(f'task {name!r} is not a task folder\'s ({", ".join(TASKS)}) nor an importable module '
                     f'({error})') from None
  if not isinstance(spec, TaskSpec):
    raise ValueError(f'module {name!r} has no SPEC (a lra_posenc.tasks.TaskSpec)')
  if spec.name != name:
    raise ValueError(f'module {name!r}: SPEC.name is {spec.name!r}; a task outside the package is named by its '
                     'module')
  return spec


# A --task flag's help: the task folders' names, or a module (`find`).
ARGUMENT_HELP = f'{", ".join(TASKS)}, or the module of a task outside the package.'


def argument(name: str) -> TaskSpec:
  """`find` as an argparse `type`: a --task whose error is the message."""
  try:
    return find(name)
  except ValueError as error:
    raise argparse.ArgumentTypeError(str(error)) from None
# Every task's ConfigHistory, by name: `checkpointing.read_config` and `restore_best` of a run of any task.
CONFIG_HISTORIES: dict[str, ConfigHistory] = {name: history for spec in TASKS.values()
                                              for name, history in spec.config_history.items()}
