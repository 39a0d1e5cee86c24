"""Causal language modelling as the scripts (sweeps, benchmarks, the results summary) know it."""
from lra_posenc.lm import scoring, settings, train
from lra_posenc.tasks import TaskSpec

SUMMARY_TABLES = (
    {'title': 'Tiny Shakespeare `:cpu` past the training length',
     'setting': '`configs/lm/shakespeare_char.py:cpu` (nanoGPT\'s CPU recipe: 4 layers, d 128, trained on windows '
                'of 64 characters for 2000 steps), best-validation checkpoint, loss per character (nats) over the '
                'whole validation split in non-overlapping windows of 1 to 16 times the training length, ranked and '
                'tested at 16 times (1024 characters); learned trained at 1213296, alibi, rope and sinusoidal seed 0 at '
                '9e5d7cd, the rest at 1b8be00 or later (character-level model, data and training unchanged between '
                'them, except that from 94849e3 on, in the runs at dcb40ef, the projections\' gradients are summed in '
                'another order: rounding only)',
     'sources': ('lm_shakespeare_char_cpu/runs',),
     'metric': 'validation loss at 1024', 'lower_is_better': True, 'axis': 'validation loss (nats), windows of 1024',
     'columns': tuple((f'validation loss at {length}', str(length)) for length in (64, 128, 256, 512, 1024)),
     'digits': 3, 'reference': 'rope', 'baseline': None, 'statistics': None},
)

SPEC = TaskSpec(settings.TASK, 'lra_posenc.lm.train', train.create_task, train.benchmark_workload,
                settings.read_settings, settings.transformer_of,
                # Mean loss per token (nats) and bits per token of the best checkpoint; lower is better.
                test_metrics=('loss', 'bits_per_token'), validation_metric='log_likelihood',
                validation_label='validation log-likelihood per token (nats)', default_target=-1.92,
                test_score_label='loss per token (nats)', test_score_title='loss per token of the scored split',
                test_score_digits=3, recorded_columns=scoring.recorded_columns, summary_tables=SUMMARY_TABLES,
                config_history=settings.CONFIG_HISTORY)
