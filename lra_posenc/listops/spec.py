"""ListOps as the scripts (sweeps, length studies, benchmarks) know it."""
from lra_posenc.listops import length_scores, settings, train
from lra_posenc.tasks import TaskSpec

SPEC = TaskSpec('listops', 'lra_posenc.listops.train', train.create_task, train.benchmark_workload,
                settings.read_settings, settings.transformer_of, test_metrics=('accuracy',), validation_metric='accuracy',
                validation_label='validation accuracy', default_target=0.4, test_score_label='test accuracy',
                test_score_title='ListOps test accuracy', test_score_digits=3,
                scores_by_length=length_scores.scores_by_length, draws_length_sets=True,
                scores_by_depth=length_scores.scores_by_depth)
