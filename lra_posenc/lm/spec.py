"""Causal language modelling as the scripts (sweeps, benchmarks) know it."""
from lra_posenc.lm import settings, train
from lra_posenc.tasks import TaskSpec

SPEC = TaskSpec(settings.TASK, 'lra_posenc.lm.train', train.create_task, train.benchmark_workload,
                settings.read_settings, settings.transformer_of,
                # Mean loss per token (nats) and bits per token of the best checkpoint; lower is better.
                test_metrics=('loss', 'bits_per_token'), validation_metric='log_likelihood',
                validation_label='validation log-likelihood per token (nats)', default_target=-1.92,
                test_score_label='loss per token (nats)', test_score_title='loss per token of the scored split',
                test_score_digits=3)
