"""Translation as the scripts (sweeps, length studies, benchmarks) know it."""
from lra_posenc.tasks import TaskSpec
from lra_posenc.translation import length_scores, settings, train

SPEC = TaskSpec('translation', 'lra_posenc.translation.train', train.create_task, train.benchmark_workload,
                settings.read_settings, settings.transformer_of,
                # sacreBLEU (the headline), then the Multi30k literature's tokenized lowercased BLEU.
                test_metrics=('bleu', 'tokenized_bleu'), validation_metric='accuracy',
                validation_label='validation token accuracy (teacher-forced)', default_target=0.5,
                test_score_label='sacreBLEU', test_score_title='sacreBLEU of the test translations',
                test_score_digits=2, scores_by_length=length_scores.scores_by_length,
                scores_by_recorded_length=length_scores.recorded_scores_by_length)
