"""ListOps as the scripts (sweeps, length studies, benchmarks, the results summary) know it."""
from lra_posenc.listops import attention_maps, length_scores, settings, train
from lra_posenc.tasks import TaskSpec

# The length study's set in length_scores.json (length_generalisation.length_set_key's form): 500 expressions
# per bucket.
LENGTH_SET = 'listops [64, 128, 256, 512] 500'

SUMMARY_TABLES = (
    {'title': 'ListOps at convergence', 'question': 'a bidirectional encoder, within the training lengths',
     'setting': 'test accuracy of the best-validation checkpoint; `configs/listops/lra.py:sweep` trained until '
                'validation stops improving (patience 8, at most 30000 steps)',
     'sources': ('listops_plateau/runs',),
     'metric': 'test accuracy', 'axis': 'test accuracy', 'columns': (('test accuracy', 'test accuracy'),), 'digits': 3,
     'reference': 'sinusoidal', 'baseline': None, 'statistics': None},
    {'title': 'ListOps beyond the training lengths', 'question': 'a bidirectional encoder, beyond the training lengths',
     'setting': 'checkpoints of table 1\'s setting (retrained), accuracy on 500 expressions per length bucket '
                '(training: 11-63 tokens), ranked and tested at 256-511 tokens',
     'sources': ('listops_plateau_by_length/runs',),
     'metric': f'{LENGTH_SET} 256-511', 'axis': 'test accuracy at 256-511 tokens',
     'columns': ((f'{LENGTH_SET} 64-127', '64-127'), (f'{LENGTH_SET} 128-255', '128-255'),
                 (f'{LENGTH_SET} 256-511', '256-511')), 'digits': 3,
     'reference': 'sinusoidal', 'baseline': (f'{LENGTH_SET} 256-511 majority', 'majority class at 256-511'),
     'statistics': None},
)

SPEC = TaskSpec('listops', 'lra_posenc.listops.train', train.create_task, train.benchmark_workload,
                settings.read_settings, settings.transformer_of, test_metrics=('accuracy',), validation_metric='accuracy',
                validation_label='validation accuracy', default_target=0.4, test_score_label='test accuracy',
                test_score_title='ListOps test accuracy', test_score_digits=3,
                scores_by_length=length_scores.scores_by_length, draws_length_sets=True,
                scores_by_depth=length_scores.scores_by_depth, summary_tables=SUMMARY_TABLES,
                attention_maps=attention_maps.attention_maps, generated_data=train.data_command,
                config_history=settings.CONFIG_HISTORY)
