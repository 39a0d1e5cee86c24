"""The task registry: what the scripts need of each task, by name.

Tasks depend on the shared machinery (training, models, benchmarking), never the other
way; this registry sits above both, for the scripts.
"""
import dataclasses
from collections.abc import Callable

import ml_collections

from lra_posenc import benchmarking
from lra_posenc.listops import length_scores as listops_length_scores
from lra_posenc.listops import settings as listops_settings
from lra_posenc.listops import train as listops_train
from lra_posenc.models.transformer import TransformerConfig
from lra_posenc.training.task import Task
from lra_posenc.translation import length_scores as translation_length_scores
from lra_posenc.translation import settings as translation_settings
from lra_posenc.translation import train as translation_train

# (workdir, length bucket edges, *, num_samples, data_dir) -> bucket -> {'score', 'examples'[, 'majority']}.
LengthScores = Callable[..., dict[str, dict]]
# (run_dir, length bucket edges, *, checkpoint, bleu_name, data_dir) -> bucket -> {'score', 'examples'}, or None
# for a run that recorded no sentence statistics.
RecordedLengthScores = Callable[..., dict[str, dict] | None]


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """One task, as sweeps, length studies and benchmarks use it.

  Attributes:
    module: its training program (`python -m MODULE --config=... --workdir=...`).
    create_task: (config, workdir) -> the trainer's Task, data read (or generated).
    benchmark_workload: config -> the model on synthetic batches of the config's shapes.
    read_settings: config -> its typed settings, every section checked and no data read (raises ValueError
      naming the bad key).
    transformer_of: config (a trained run's, say) -> its Transformer stack, checked, at the positions it serves.
    test_metrics: the scores in results.json's test_sets[split] that sweeps tabulate, the headline first.
    validation_metric: the trainer's selection metric, as metrics.jsonl records it.
    validation_label: what that metric is, for axes and titles.
    default_target: a validation score whose first crossing sweeps report.
    test_score_label: what a length study's score is, for axes ('test accuracy'), and `test_score_title` for
      titles; `test_score_digits` its decimals in tables.
    scores_by_length: a run's best checkpoint scored per length bucket; tasks that draw new test sets
      (`draws_length_sets`) draw `num_samples` per bucket into `data_dir`.
    scores_by_depth: per nesting depth of the run's test split, for tasks whose inputs nest (ListOps); or None.
    scores_by_recorded_length: per bucket of source words, from the sentence statistics a run recorded, for
      tasks that record them (translation); or None.
  """
  module: str
  create_task: Callable[[ml_collections.ConfigDict, str], Task]
  benchmark_workload: Callable[[ml_collections.ConfigDict], benchmarking.Workload]
  read_settings: Callable[[ml_collections.ConfigDict], object]
  transformer_of: Callable[[ml_collections.ConfigDict], TransformerConfig]
  test_metrics: tuple[str, ...]
  validation_metric: str
  validation_label: str
  default_target: float
  test_score_label: str
  test_score_title: str
  test_score_digits: int
  scores_by_length: LengthScores
  draws_length_sets: bool
  scores_by_depth: Callable[[str], dict[str, dict]] | None = None
  scores_by_recorded_length: RecordedLengthScores | None = None


TASKS: dict[str, TaskSpec] = {
    'listops': TaskSpec('lra_posenc.listops.train', listops_train.create_task, listops_train.benchmark_workload,
                        listops_settings.read_settings, listops_settings.transformer_of,
                        test_metrics=('accuracy',), validation_metric='accuracy',
                        validation_label='validation accuracy', default_target=0.4,
                        test_score_label='test accuracy', test_score_title='ListOps test accuracy',
                        test_score_digits=3, scores_by_length=listops_length_scores.scores_by_length,
                        draws_length_sets=True, scores_by_depth=listops_length_scores.scores_by_depth),
    'translation': TaskSpec('lra_posenc.translation.train', translation_train.create_task,
                            translation_train.benchmark_workload, translation_settings.read_settings,
                            translation_settings.transformer_of,
                            # sacreBLEU (the headline), then the Multi30k literature's tokenized lowercased BLEU.
                            test_metrics=('bleu', 'tokenized_bleu'), validation_metric='accuracy',
                            validation_label='validation token accuracy (teacher-forced)', default_target=0.5,
                            test_score_label='sacreBLEU', test_score_title='sacreBLEU of the test translations',
                            test_score_digits=2, scores_by_length=translation_length_scores.scores_by_length,
                            draws_length_sets=False,
                            scores_by_recorded_length=translation_length_scores.recorded_scores_by_length),
}
