"""Translation as the studies (sweeps, length studies, benchmarks) know it; its summary tables are declared by the
study files beside its results (`lra_posenc.studies.study_files`)."""
from lra_posenc.tasks import PairedTest, TaskSpec
from lra_posenc.translation import bleu, length_scores, settings, significance, train, translate

SPEC = TaskSpec('translation', 'lra_posenc.translation.train', train.create_task, settings.read_settings,
                # sacreBLEU (the headline), then the Multi30k literature's tokenized lowercased BLEU.
                test_metrics=('bleu', 'tokenized_bleu'), validation_metric='accuracy',
                validation_label='validation token accuracy (teacher-forced)', default_target=0.5,
                test_score_label='sacreBLEU', test_score_title='sacreBLEU of the test translations',
                test_score_digits=2, scores_by_length=length_scores.scores_by_length,
                scores_by_recorded_length=length_scores.recorded_scores_by_length,
                recorded_choices=(translate.CHECKPOINTS, bleu.BLEU_NAMES),
                paired_test=PairedTest(significance.pooled_statistics, significance.pooled_bootstrap_p,
                                       bleu.STATISTICS_FILE),
                benchmark_workload=train.benchmark_workload, transformer_of=settings.transformer_of,
                config_history=settings.CONFIG_HISTORY)
