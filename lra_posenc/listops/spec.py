"""ListOps as the studies (sweeps, length studies, benchmarks) know it; its summary tables are declared by the
study files beside its results (`lra_posenc.studies.study_files`)."""
from lra_posenc.listops import attention_maps, length_scores, settings, train
from lra_posenc.tasks import TaskSpec

SPEC = TaskSpec('listops', 'lra_posenc.listops.train', train.create_task, settings.read_settings,
                test_metrics=('accuracy',), validation_metric='accuracy', validation_label='validation accuracy',
                default_target=0.4, test_score_label='test accuracy', test_score_title='ListOps test accuracy',
                test_score_digits=3, scores_by_length=length_scores.scores_by_length, draws_length_sets=True,
                scores_by_depth=length_scores.scores_by_depth, attention_maps=attention_maps.attention_maps,
                generated_data=train.data_command, benchmark_workload=train.benchmark_workload,
                transformer_of=settings.transformer_of, config_history=settings.CONFIG_HISTORY)
