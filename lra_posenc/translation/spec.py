"""Translation as the scripts (sweeps, length studies, benchmarks, the results summary) know it."""
from lra_posenc.tasks import PairedTest, TaskSpec
from lra_posenc.translation import bleu, length_scores, settings, significance, train, translate

# What both `:sweep` tables (En→De and Fr→En) rank and show: sacreBLEU of the best checkpoint on Multi30k's test
# sets.
SWEEP_SCORES = {
    'metric': 'test_2016_flickr bleu', 'axis': 'sacreBLEU, test_2016_flickr',
    'columns': (('test_2016_flickr bleu', 'test_2016_flickr'), ('test_2017_flickr bleu', 'test_2017_flickr'),
                ('test_2017_mscoco bleu', 'test_2017_mscoco')), 'digits': 2,
    'reference': 'sinusoidal', 'baseline': None, 'statistics': ('best', 'test_2016_flickr', 'bleu'),
    'question': 'translation (encoder-decoder)'}

SUMMARY_TABLES = (
    {'title': 'Multi30k En→De `:sweep`',
     'setting': 'sacreBLEU of the best-validation checkpoint, ranked and tested on test_2016_flickr; '
                '`configs/translation/multi30k.py:sweep`, 1500 steps; none, sinusoidal, rope and legendre trained '
                'at 6dd6a2d (2026-12-01), dynamic_bias, transformer_xl and xpos at cd5c540 (2026-11-24; dynamic_bias '
                'seed 0 retrained at 359f20a reproduces its BLEU exactly)',
     'sources': ('multi30k_sweep/runs',)} | SWEEP_SCORES,
    {'title': 'Multi30k En→De `:tiny`',
     'setting': 'tokenized lowercased BLEU (the literature\'s protocol) of the averaged checkpoint (the last 10 '
                'validated), ranked and tested on test_2016_flickr; `configs/translation/multi30k.py:tiny`, '
                'at most 10000 steps, patience 10',
     'sources': ('multi30k_tiny/runs',),
     'metric': 'averaged test_2016_flickr tokenized_bleu',
     'axis': 'tokenized BLEU, averaged checkpoint, test_2016_flickr',
     'columns': (('averaged test_2016_flickr tokenized_bleu', 'test_2016_flickr'),
                 ('averaged test_2017_flickr tokenized_bleu', 'test_2017_flickr'),
                 ('averaged test_2017_mscoco tokenized_bleu', 'test_2017_mscoco')), 'digits': 2,
     'reference': 'sinusoidal', 'baseline': None, 'statistics': ('averaged', 'test_2016_flickr', 'tokenized_bleu'),
     'question': 'translation (encoder-decoder)'},
    {'title': 'Multi30k Fr→En `:sweep`',
     'setting': 'sacreBLEU of the best-validation checkpoint, ranked and tested on test_2016_flickr; '
                '`configs/translation/multi30k.py:sweep` with `data.source_lang=fr`, `data.target_lang=en`, 1500 '
                'steps; the three encodings of the seed report C05, which trained Fr→En on IWSLT2017 (its BLEU-4: '
                'rope 0.5594, learned 0.3717, sinusoidal 0.3187)',
     'sources': ('multi30k_fr_en/runs',)} | SWEEP_SCORES,
)

SPEC = TaskSpec('translation', 'lra_posenc.translation.train', train.create_task, train.benchmark_workload,
                settings.read_settings, settings.transformer_of,
                # sacreBLEU (the headline), then the Multi30k literature's tokenized lowercased BLEU.
                test_metrics=('bleu', 'tokenized_bleu'), validation_metric='accuracy',
                validation_label='validation token accuracy (teacher-forced)', default_target=0.5,
                test_score_label='sacreBLEU', test_score_title='sacreBLEU of the test translations',
                test_score_digits=2, scores_by_length=length_scores.scores_by_length,
                scores_by_recorded_length=length_scores.recorded_scores_by_length,
                recorded_choices=(translate.CHECKPOINTS, bleu.BLEU_NAMES), summary_tables=SUMMARY_TABLES,
                paired_test=PairedTest(significance.pooled_statistics, significance.pooled_bootstrap_p,
                                       bleu.STATISTICS_FILE),
                config_history=settings.CONFIG_HISTORY)
