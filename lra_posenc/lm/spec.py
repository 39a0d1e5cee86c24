"""Causal language modelling as the studies (sweeps, benchmarks) know it; its summary tables are declared by the
study files beside its results (`lra_posenc.studies.study_files`)."""
from lra_posenc.lm import scoring, settings, train
from lra_posenc.tasks import TaskSpec

SPEC = TaskSpec(settings.TASK, 'lra_posenc.lm.train', train.create_task, settings.read_settings,
                # Mean loss per token (nats) and bits per token of the best checkpoint; lower is better.
                test_metrics=('loss', 'bits_per_token'), validation_metric='log_likelihood',
                validation_label='validation log-likelihood per token (nats)', default_target=-1.92,
                test_score_label='loss per token (nats)', test_score_title='loss per token of the scored split',
                test_score_digits=3, recorded_columns=scoring.recorded_columns,
                benchmark_workload=train.benchmark_workload, transformer_of=settings.transformer_of,
                config_history=settings.CONFIG_HISTORY)
