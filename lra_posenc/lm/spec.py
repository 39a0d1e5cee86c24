"""Causal language modelling as the scripts (sweeps, benchmarks, the results summary) know it."""
from lra_posenc.lm import scoring, settings, train
from lra_posenc.tasks import TaskSpec

_RECIPE = ('`configs/lm/shakespeare_char.py:cpu` (nanoGPT\'s CPU recipe: 4 layers, d 128, trained on windows of 64 '
           'characters for 2000 steps), best-validation checkpoint, loss per character (nats) over the whole '
           'validation split (the split the checkpoint was chosen on: one text file has no other) in '
           'non-overlapping windows of 1 to 16 times the training length')
_SHAKESPEARE = (_RECIPE + '; T5\'s last bucket and FIRE\'s threshold follow the window, and randomized positions '
                'are scored at drawn positions, from fda4ab6 on (the runs before: superseded_runs, not in the table); '
                'the other rows trained at 1213296, 9e5d7cd, 1b8be00 or later (model, data and training unchanged '
                'between them but for rounding: RESULTS.md)')
_WAR_AND_PEACE = (_RECIPE.replace('validation split', 'validation split of War and Peace (319,622 characters)')
                  + '; `--set=data.text_file=.../warpeace/input.txt`, every run at fda4ab6')
LENGTHS = (64, 128, 256, 512, 1024)
_QUESTION = 'a causal language model, past the training length'


def _study_tables(corpus: str, setting: str, source: str) -> tuple[dict, dict]:
  """A corpus's two tables: the loss by length, ranked at 16 times beside the rank at the training length, and the
  contrast loss(kL) - loss(L) with the far-context gain."""
  return (
      {'title': f'{corpus} `:cpu` past the training length',
       'setting': setting + ', ranked and tested at 16 times (1024 characters)',
       'sources': (source,),
       'metric': 'validation loss at 1024', 'lower_is_better': True,
       'axis': 'validation loss (nats), windows of 1024',
       'columns': tuple((f'validation loss at {length}', str(length)) for length in LENGTHS),
       'digits': 3, 'reference': 'rope', 'baseline': None, 'statistics': None, 'question': _QUESTION,
       # The verdict says whether the order at 16 times follows the order at the training length.
       'rank_also_at': 'validation loss at 64'},
      {'title': f'{corpus} `:cpu`, extrapolation as a contrast',
       'setting': setting + '; per seed, loss(kL) - loss(L) ("+k×": windows k times the training length L), ranked '
                  'and tested at 16 times, and the far-context gain at 16 times: the loss at positions 64 and later '
                  'inside windows of 1024 minus the loss at positions 32-63 inside windows of 64 (below 0: characters '
                  'more than 64 back help)',
       'sources': (source,),
       'metric': 'validation extrapolation at 1024', 'lower_is_better': True,
       'axis': 'loss at 1024 minus loss at 64 (nats)',
       'columns': tuple((f'validation extrapolation at {length}', f'+{length // 64}×') for length in LENGTHS[1:])
                  + (('validation far-context gain at 1024', 'far-context gain at 16×'),),
       'digits': 3, 'reference': 'rope', 'baseline': None, 'statistics': None, 'question': _QUESTION})


SUMMARY_TABLES = (_study_tables('Tiny Shakespeare', _SHAKESPEARE, 'lm_shakespeare_char_cpu/runs')
                  + _study_tables('War and Peace', _WAR_AND_PEACE, 'lm_warpeace_char_cpu/runs'))

SPEC = TaskSpec(settings.TASK, 'lra_posenc.lm.train', train.create_task, train.benchmark_workload,
                settings.read_settings, settings.transformer_of,
                # Mean loss per token (nats) and bits per token of the best checkpoint; lower is better.
                test_metrics=('loss', 'bits_per_token'), validation_metric='log_likelihood',
                validation_label='validation log-likelihood per token (nats)', default_target=-1.92,
                test_score_label='loss per token (nats)', test_score_title='loss per token of the scored split',
                test_score_digits=3, recorded_columns=scoring.recorded_columns, summary_tables=SUMMARY_TABLES,
                config_history=settings.CONFIG_HISTORY)
