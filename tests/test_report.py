"""The results summary: the committed one is what the committed run files give, and its figures are right on a
small results tree whose numbers are known."""
import dataclasses
import json
import os
import re
import subprocess

import numpy as np
import pytest
import scipy.stats

from lra_posenc.studies import report
from lra_posenc.studies import study_files
from lra_posenc.studies.study_files import SummaryTable
from lra_posenc.config_files import load_config
from lra_posenc.data.files import DataError
from lra_posenc.translation import bleu
from lra_posenc.translation.settings import read_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STALE = 'the committed summary differs from the run files under results/: run `python -m lra_posenc.studies.report`'


def test_committed_summary_is_what_the_run_files_give():
  tables = report.summary_tables(os.path.join(ROOT, 'results'))
  with open(os.path.join(ROOT, 'results', report.SUMMARY_FILE)) as f:
    assert f.read() == report.summary_markdown(tables, ''), STALE
  with open(os.path.join(ROOT, 'RESULTS.md')) as f:
    text = f.read()
  assert report.SUMMARY_START in text, STALE
  block = report.summary_markdown(tables, 'results/')
  assert report.with_block(text, block) == text, STALE
  assert len(block.splitlines()) <= 150  # Nine tables: the LM's two of 20 rows, two of 6 on a second corpus.
  with open(os.path.join(ROOT, 'README.md')) as f:
    readme = f.read()
  assert report.with_verdicts(readme, tables) == readme, STALE
  with open(os.path.join(ROOT, 'results', report.INDEX_FILE)) as f:
    assert f.read() == report.study_index(os.path.join(ROOT, 'results'), report.index_documents(
        os.path.join(ROOT, 'RESULTS.md'))), STALE


def test_every_relative_link_of_the_documents_names_a_committed_path():
  """A figure cites its files by link: a moved study or a file never committed fails here."""
  listed = subprocess.run(['git', 'ls-files'], cwd=ROOT, capture_output=True, text=True)
  if listed.returncode:
    pytest.skip('not a git checkout: which files are committed is unknown')
  committed = set()
  for path in listed.stdout.splitlines():
    while path and path not in committed:  # The file and every folder above it.
      committed.add(path)
      path = os.path.dirname(path)
  documents = [path for path in committed if path.endswith('.md') and (
      '/' not in path or path.startswith(('docs/', 'results/')))]
  missing = []
  for document in sorted(documents):
    with open(os.path.join(ROOT, document)) as f:
      for number, line in enumerate(f, 1):
        for target in re.findall(r'\]\(([^)\s]+)\)', line):
          if '://' in target or target.startswith(('#', 'mailto:')):
            continue
          path = os.path.normpath(os.path.join(os.path.dirname(document), target.split('#')[0]))
          if path not in committed and path != '.':
            missing.append(f'{document}:{number}: {target}')
  assert not missing, '\n'.join(missing)


def test_the_index_names_every_folder_with_the_sections_citing_it_and_its_runs_provenance(tmp_path):
  provenance = lambda commit, date, platform: {'git_commit': commit * 40, 'date': f'{date}T10:00:00+00:00',
                                               'devices': {'platform': platform, 'count': 1, 'kind':
                                                           'NVIDIA H100' if platform == 'gpu' else 'cpu'}}
  for run, (commit, date, platform) in {'study/runs/a/seed_0': ('a', '2026-11-20', 'cpu'),
                                        'study/runs/a/seed_1': ('b', '2026-11-22', 'gpu')}.items():
    os.makedirs(tmp_path / run)
    (tmp_path / run / 'results.json').write_text(json.dumps({'provenance': provenance(commit, date, platform)}))
  os.makedirs(tmp_path / 'tables_only')
  documents = {'RESULTS.md': f'# Results\n{report.SUMMARY_START}\nresults/tables_only\n{report.SUMMARY_END}\n'
                             '## First study\nsee results/study/runs\n## Second\nresults/study again\n'}
  rows = {line.split(' | ')[0]: line.split(' | ') for line in report.study_index(str(tmp_path), documents).splitlines()
          if line.startswith('| [')}
  assert rows['| [study/](study/)'][1:] == ['RESULTS.md § First study; RESULTS.md § Second', '2', 'aaaaaaa, bbbbbbb',
                                            'CPU (model not recorded); NVIDIA H100', '2026-11-20 to 2026-11-22 |']
  assert rows['| [tables_only/](tables_only/)'][1:] == ['not cited', '-', '-', '-', '- |']  # The summary is no section.


def write_run(run_dir, *, test_sets, reason='patience', length_scores=None, config=None):
  """A finished run as training leaves it, with only the files and fields the report reads."""
  os.makedirs(run_dir)
  results = {'test_sets': test_sets, 'validation': {'accuracy': 0.5}, 'best_step': 100, 'step': 300}
  if reason:
    results['training_ended'] = {'reason': reason, 'step': 300}
  with open(os.path.join(run_dir, 'results.json'), 'w') as f:
    json.dump(results, f)
  if length_scores:
    with open(os.path.join(run_dir, 'length_scores.json'), 'w') as f:
      json.dump(length_scores, f)
  if config:
    with open(os.path.join(run_dir, 'config.json'), 'w') as f:
      json.dump(config.to_dict(), f)


ACCURACIES = {'sinusoidal': [0.40, 0.42, 0.47], 'rope': [0.50, 0.53, 0.51], 'alibi': [0.45]}
REASONS = {'sinusoidal': ['patience', 'num_train_steps', 'patience'], 'rope': ['patience'] * 3,
           'alibi': ['num_train_steps']}
LISTOPS_TABLE = SummaryTable(task='listops', position=1, title='Toy ListOps', question='a toy question',
                             setting='toy setting', sources=('toy/runs',), metric='test accuracy',
                             axis='test accuracy', columns=(('test accuracy', 'accuracy'),), digits=3,
                             reference='sinusoidal')
# The same table as its study file declares it.
LISTOPS_STUDY = '''task = "listops"

[[tables]]
position = 1
title = "Toy ListOps"
question = "a toy question"
setting = "toy setting"
sources = ["toy/runs"]
metric = "test accuracy"
axis = "test accuracy"
columns = [["test accuracy", "accuracy"]]
digits = 3
reference = "sinusoidal"
'''


@pytest.fixture
def listops_tree(tmp_path):
  """TMP/results/toy/runs: ACCURACIES, ended for REASONS, and a run started but never finished."""
  runs = tmp_path / 'results' / 'toy' / 'runs'
  for encoding, accuracies in ACCURACIES.items():
    for seed, (accuracy, reason) in enumerate(zip(accuracies, REASONS[encoding])):
      write_run(str(runs / encoding / f'seed_{seed}'), test_sets={'test': {'accuracy': accuracy}}, reason=reason)
  os.makedirs(runs / 'alibi' / 'seed_1')  # No results.json.
  return str(tmp_path / 'results')


def test_rows_give_mean_std_rank_ending_and_welch_against_the_reference(listops_tree):
  rows = {row['encoding']: row for row in report.table_rows(LISTOPS_TABLE, listops_tree)[0]}
  assert [rows[e]['rank'] for e in ('rope', 'alibi', 'sinusoidal')] == [1, 2, 3]
  for encoding, accuracies in ACCURACIES.items():
    stats = rows[encoding]['stats']['test accuracy']
    assert rows[encoding]['n'] == len(accuracies)
    assert stats['mean'] == pytest.approx(np.mean(accuracies))
    assert stats['std'] == (pytest.approx(np.std(accuracies, ddof=1)) if len(accuracies) > 1 else None)
  assert rows['rope']['delta'] == pytest.approx(np.mean(ACCURACIES['rope']) - np.mean(ACCURACIES['sinusoidal']))
  assert rows['rope']['welch_p'] == pytest.approx(
      scipy.stats.ttest_ind(ACCURACIES['rope'], ACCURACIES['sinusoidal'], equal_var=False).pvalue)
  assert rows['alibi']['welch_p'] is None  # One seed.
  assert rows['sinusoidal']['delta'] is None and rows['sinusoidal']['welch_p'] is None
  assert rows['sinusoidal']['ended'] == '2 patience, 1 budget'
  assert rows['rope']['ended'] == '3 patience'
  assert rows['alibi']['ended'] == '1 budget'


def test_a_lower_is_better_table_ranks_ascending_and_says_so(listops_tree):
  table = dataclasses.replace(LISTOPS_TABLE, lower_is_better=True)
  rows = report.table_rows(table, listops_tree)[0]
  assert [row['encoding'] for row in rows] == ['sinusoidal', 'alibi', 'rope']  # Means 0.430, 0.450, 0.513.
  assert [row['rank'] for row in rows] == [1, 2, 3]
  assert report.markdown_table(1, table, rows, '')[0].endswith('; lower is better ([toy/runs](toy/runs))')
  assert report.verdicts([(table, rows, {})])[0].startswith('- **Toy ListOps** (table 1, lower is better): sinusoidal')


def test_a_missing_welch_p_says_whether_a_side_has_one_seed_or_no_spread():
  side = lambda values: {'stats': {'test accuracy': {'values': values, 'mean': float(np.mean(values))}}}
  reference = side([0.5, 0.5])
  assert report._against_reference(LISTOPS_TABLE, side([0.5]), reference)['welch_missing'] == 'one seed'
  flat = report._against_reference(LISTOPS_TABLE, side([0.5, 0.5]), reference)  # t = 0 / 0.
  assert flat == {'delta': 0.0, 'welch_p': None, 'welch_missing': 'no spread over seeds'}
  one_flat = report._against_reference(LISTOPS_TABLE, side([0.4, 0.6]), reference)  # t = 0 / 0.1: Welch's p is 1.
  assert one_flat['welch_p'] == pytest.approx(1.0) and one_flat['welch_missing'] is None


def test_table_and_verdicts_state_the_figures(listops_tree):
  table = report.markdown_table(1, LISTOPS_TABLE, report.table_rows(LISTOPS_TABLE, listops_tree)[0], 'results/')
  assert table[0].startswith('#### 1. Toy ListOps: toy setting') and '[toy/runs](results/toy/runs)' in table[0]
  rope_mean, rope_std = np.mean(ACCURACIES['rope']), np.std(ACCURACIES['rope'], ddof=1)
  welch = scipy.stats.ttest_ind(ACCURACIES['rope'], ACCURACIES['sinusoidal'], equal_var=False).pvalue
  delta = rope_mean - np.mean(ACCURACIES['sinusoidal'])
  # One Welch test in the family (alibi has one seed), so Holm leaves rope's p as it is.
  assert table[3] == (f'| rope | 3 | {rope_mean:.3f} ± {rope_std:.3f} | 1 | 3 patience | +{delta:.3f} | '
                      f'{welch:.3f} ({welch:.3f}) |')
  assert table[4] == f"| alibi | 1 | 0.450 | 2 | 1 budget | {0.45 - np.mean(ACCURACIES['sinusoidal']):+.3f} | n/a |"
  assert table[5].startswith('| sinusoidal | 3 |') and table[5].endswith('| 3 | 2 patience, 1 budget | reference | - |')
  verdict, = report.verdicts(report.summary_tables(listops_tree, [LISTOPS_TABLE]))[:1]
  # The runner-up, alibi, has one seed: no test separates them.
  assert f'rope ranks first, not separated from alibi ({rope_mean - 0.45:.3f}; no Welch test: one seed)' in verdict
  assert f'{rope_mean:.3f} ± {rope_std:.3f} (n=3), +{delta:.3f} against sinusoidal' in verdict
  assert f'Welch p = {welch:.3f} (Holm {welch:.3f}): ' + ('significant at 5%' if welch < 0.05 else 'not established') in verdict


def test_holm_adjusts_within_the_family_and_keeps_the_order():
  # Sorted: 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised to the 0.06 before it.
  assert report.holm([0.01, 0.04, 0.03, None]) == pytest.approx([0.03, 0.06, 0.06, None], nan_ok=True)
  assert report.holm([0.5, 0.6]) == [1.0, 1.0] and report.holm([None]) == [None] and report.holm([]) == []
  rng = np.random.default_rng(0)
  for _ in range(20):
    p = rng.uniform(0, 0.2, 6)
    adjusted = np.array(report.holm(list(p)))
    assert (adjusted >= p).all() and (adjusted <= 1).all()
    assert all(adjusted[i] <= adjusted[j] for i in range(6) for j in range(6) if p[i] <= p[j])  # Order kept.


def test_the_first_row_leads_only_where_it_is_separated_from_the_second(listops_tree):
  side = lambda encoding, values: {'encoding': encoding, 'stats': {'test accuracy': {
      'values': values, 'mean': float(np.mean(values))}}}
  apart = [side('a', [0.90, 0.91, 0.92]), side('b', [0.50, 0.52, 0.51])]
  p = scipy.stats.ttest_ind([0.90, 0.91, 0.92], [0.50, 0.52, 0.51], equal_var=False).pvalue
  assert report._first(LISTOPS_TABLE, apart) == f'a leads b by 0.400 (Welch p = {report.p_cell(p)})'
  close = [side('a', [0.52, 0.40, 0.60]), side('b', [0.50, 0.45, 0.55])]
  p = scipy.stats.ttest_ind([0.52, 0.40, 0.60], [0.50, 0.45, 0.55], equal_var=False).pvalue
  assert report._first(LISTOPS_TABLE, close) == f'a ranks first, not separated from b (0.007; Welch p = {p:.3f})'


def test_length_scores_and_runs_csv_are_read(tmp_path):
  length_set = 'listops [64, 128] 10'
  for encoding, scores in {'sinusoidal': [0.2, 0.3], 'rope': [0.1, 0.12]}.items():
    for seed, score in enumerate(scores):
      write_run(str(tmp_path / 'lengths' / encoding / f'seed_{seed}'), test_sets={'test': {'accuracy': 0.5}},
                length_scores={length_set: {'64-127': {'score': score, 'majority': 0.25, 'examples': 10}}})
  write_run(str(tmp_path / 'lengths' / 'alibi' / 'seed_0'), test_sets={'test': {'accuracy': 0.5}})  # Not scored.
  table = dataclasses.replace(LISTOPS_TABLE, sources=('lengths',), metric=f'{length_set} 64-127',
                              columns=((f'{length_set} 64-127', '64-127'),),
                              baseline=(f'{length_set} 64-127 majority', 'majority class'))
  rows, unscored = report.table_rows(table, str(tmp_path))
  assert [(row['encoding'], row['n']) for row in rows] == [('sinusoidal', 2), ('rope', 2)]
  assert rows[1]['stats'][f'{length_set} 64-127']['mean'] == pytest.approx(0.11)
  assert unscored == {'alibi': [0]}
  heading = report.markdown_table(2, table, rows, '', unscored)[0]
  assert 'majority class 0.250' in heading and 'no score, so not in the table: alibi seed 0' in heading

  os.makedirs(tmp_path / 'csv_study')
  with open(tmp_path / 'csv_study' / 'runs.csv', 'w') as f:
    f.write('variant,seed,test accuracy,best step\nsinusoidal,0,0.4,100\nsinusoidal,1,0.5,100\nnone,0,0.2,100\n')
  rows, unscored = report.table_rows(dataclasses.replace(LISTOPS_TABLE, sources=('csv_study/runs.csv',)), str(tmp_path))
  assert unscored == {} and [(row['encoding'], row['n'], row['ended']) for row in rows] == [
      ('sinusoidal', 2, '2 not recorded'), ('none', 1, '1 not recorded')]
  assert rows[0]['stats']['test accuracy']['mean'] == pytest.approx(0.45)
  with open(tmp_path / 'csv_study' / 'runs.csv', 'a') as f:
    f.write('rope,0,0.4x,100\n')
  with pytest.raises(DataError, match=r"csv_study/runs.csv:5: column 'test accuracy': '0.4x' is not a number"):
    report.table_rows(dataclasses.replace(LISTOPS_TABLE, sources=('csv_study/runs.csv',)), str(tmp_path))
  with open(tmp_path / 'csv_study' / 'runs.csv', 'w') as f:
    f.write('variant,seed,test accuracy,best step\nsinusoidal,0,0.4\n')
  with pytest.raises(DataError, match=r'csv_study/runs.csv:2: 3 columns where the header has 4'):
    report.table_rows(dataclasses.replace(LISTOPS_TABLE, sources=('csv_study/runs.csv',)), str(tmp_path))


def test_bootstrap_pools_the_seeds_that_recorded_sentence_statistics(tmp_path):
  references = [f'ein Hund {i} läuft schnell über die grüne Wiese im Park .' for i in range(30)]
  worse = [f'eine Katze {i} schläft .' for i in range(30)]
  config = load_config(os.path.join(ROOT, 'configs', 'translation', 'multi30k.py'), 'tiny')
  config.data.data_dir = str(tmp_path / 'multi30k')
  data = read_data(config.data)
  runs = {('sinusoidal', 0): references, ('sinusoidal', 1): references, ('rope', 0): references,
          ('none', 0): worse, ('none', 1): worse, ('alibi', 0): None}
  for (encoding, seed), hypotheses in runs.items():
    run_dir = str(tmp_path / 'toy' / encoding / f'seed_{seed}')
    score = (90.0 if hypotheses is references else 10.0) + seed
    write_run(run_dir, test_sets={'test_2016_flickr': {'bleu': score, 'tokenized_bleu': score}},
              reason='num_train_steps', config=config)
    if hypotheses:
      bleu.record_statistics(run_dir, 'best', 'test_2016_flickr', hypotheses, references, data)
  table = SummaryTable(task='translation', position=1, title='Toy Multi30k', question='toy', setting='toy',
                       sources=('toy',), metric='test_2016_flickr bleu', axis='BLEU',
                       columns=(('test_2016_flickr bleu', 'BLEU'),), digits=2, reference='sinusoidal',
                       statistics=('best', 'test_2016_flickr', 'bleu'))
  rows = {row['encoding']: row for row in report.table_rows(table, str(tmp_path))[0]}
  assert rows['rope']['bootstrap_p'] == 1.0 and rows['rope']['bootstrap_seeds'] == [0]  # The same translations.
  assert rows['none']['bootstrap_p'] == pytest.approx(1 / 1001) and rows['none']['bootstrap_seeds'] == [0, 1]
  assert rows['alibi']['bootstrap_p'] is None  # Recorded no statistics.
  lines = report.markdown_table(4, table, list(rows.values()), '')
  assert "sinusoidal's seeds 0, 1" in lines[0]
  # Holm over the two bootstrap tests: none's 1/1001 doubles, rope's 1 stays.
  assert rows['none']['bootstrap_holm_p'] == pytest.approx(2 / 1001) and rows['rope']['bootstrap_holm_p'] == 1.0
  assert any(line.startswith('| none |') and line.endswith('| 0.001 (0.002; 0, 1) |') for line in lines)
  assert any(line.startswith('| alibi |') and line.endswith('| n/a | n/a |') for line in lines)

  # A run scored with another BLEU (sacreBLEU with the other casing) neither pairs with the reference's.
  cased = load_config(os.path.join(ROOT, 'configs', 'translation', 'multi30k.py'), 'tiny')
  cased.data.data_dir, cased.data.tokenizer.lowercase = config.data.data_dir, not config.data.tokenizer.lowercase
  run_dir = str(tmp_path / 'toy' / 'xpos' / 'seed_0')
  write_run(run_dir, test_sets={'test_2016_flickr': {'bleu': 50.0, 'tokenized_bleu': 50.0}}, config=cased)
  bleu.record_statistics(run_dir, 'best', 'test_2016_flickr', references, references, read_data(cased.data))
  with pytest.raises(ValueError, match='xpos against the reference: BLEU .* differ'):
    report.table_rows(table, str(tmp_path))


def test_results_md_block_is_inserted_once_then_replaced():
  text = '# Results\n\nThe intro,\non two lines.\n\nMore.\n\n## A study\n'
  inserted = report.with_block(text, 'first\n')
  assert inserted == ('# Results\n\nThe intro,\non two lines.\n\n<!-- summary:start -->\nfirst\n'
                      '<!-- summary:end -->\n\nMore.\n\n## A study\n')
  assert report.with_block(inserted, 'second\n') == inserted.replace('first', 'second')
  at_the_end = '# Results\n\nIntro.\n\n<!-- summary:start -->\nold\n<!-- summary:end -->'  # No final newline.
  assert report.with_block(at_the_end, 'new\n') == at_the_end.replace('old', 'new') + '\n'


def test_main_writes_the_summary_figure_and_results_md(listops_tree):
  with open(os.path.join(listops_tree, 'toy', 'study.toml'), 'w') as f:
    f.write(LISTOPS_STUDY)
  results_md = os.path.join(os.path.dirname(listops_tree), 'RESULTS.md')
  with open(results_md, 'w') as f:
    f.write('# Results\n\nIntro.\n')
  readme = os.path.join(os.path.dirname(listops_tree), 'README.md')  # Beside RESULTS.md: the default.
  with open(readme, 'w') as f:
    f.write(f'# Toy\n\n{report.WHICH_START}\nold\n{report.WHICH_END}\n\n{report.VERDICTS_START}\nold\n'
            f'{report.VERDICTS_END}\n\nAfter.\n')
  report.main([f'--results_dir={listops_tree}', f'--results_md={results_md}'])
  with open(readme) as f:
    verdict_lines = f.read().split(report.VERDICTS_START + '\n')[1].split(report.VERDICTS_END)[0].splitlines()
  assert verdict_lines[0].startswith('- **Toy ListOps** (table 1): rope ranks first') and len(verdict_lines) == 2
  with open(os.path.join(listops_tree, report.SUMMARY_FILE)) as f:
    summary = f.read()
  assert '| rope | 3 |' in summary and '[toy/runs](toy/runs)' in summary
  with open(results_md) as f:
    text = f.read()
  assert text.startswith('# Results\n\nIntro.\n\n<!-- summary:start -->\n## Summary\n')
  assert '[toy/runs](results/toy/runs)' in text and text.endswith('<!-- summary:end -->\n')
  assert os.path.getsize(os.path.join(listops_tree, report.FIGURE_FILE)) > 0
  assert os.path.getsize(os.path.join(listops_tree, report.RANKS_FILE)) > 0


def test_caveats_count_budget_endings_few_seeds_and_mixed_versions_from_the_run_files(listops_tree):
  rows = report.table_rows(LISTOPS_TABLE, listops_tree)[0]
  assert report.caveats(rows) == ['2 of 7 runs ended at the step budget, 0 of them with the best checkpoint at the '
                                  'last step (still improving)', 'fewer than 3 seeds: alibi (1)']
  path = os.path.join(listops_tree, 'toy', 'runs', 'rope', 'seed_0', 'results.json')
  with open(path) as f:
    results = json.load(f)
  results |= {'best_step': 300, 'training_ended': {'reason': 'num_train_steps', 'step': 300},
              'provenance': {'git_commit': 'a' * 40, 'default_matmul_precision': 'highest',
                             'devices': {'platform': 'gpu', 'count': 1, 'kind': 'NVIDIA H100'}}}
  with open(path, 'w') as f:
    json.dump(results, f)
  notes = report.caveats(report.table_rows(LISTOPS_TABLE, listops_tree)[0])
  assert notes[0] == '3 of 7 runs ended at the step budget, 1 of them with the best checkpoint at the last step ' \
                     '(still improving)'
  assert notes[2:] == ['2 devices: not recorded (6 runs), NVIDIA H100 (1 run)',
                       '2 matrix-product precisions: not recorded (6 runs), highest (1 run)',
                       '2 code versions: not recorded (6 runs), aaaaaaa (1 run)']


@pytest.mark.parametrize('p, cell', [(None, 'n/a'), (0.0004, '< 0.001'), (0.012, '0.012'), (0.0499, '0.0499'),
                                     (0.04951, '0.0495'), (0.0504, '0.050'), (0.05, '0.050'), (0.7089, '0.709')])
def test_a_p_value_below_5_percent_never_prints_as_0_050(p, cell):
  assert report.p_cell(p) == cell


def test_the_rank_agreement_says_when_the_order_repeats_the_fit_at_the_training_length():
  table = dataclasses.replace(LISTOPS_TABLE, metric='loss at 1024', rank_also_at='loss at 64',
                              columns=(('loss at 64', '64'),))
  row = lambda long, short: {'stats': {'loss at 1024': {'mean': long}, 'loss at 64': {'mean': short}}}
  same = [row(1.0, 2.0), row(2.0, 2.5), row(3.0, 2.6), row(4.0, 3.0), row(5.0, 3.1), row(6.0, 3.2)]
  assert report.rank_agreement(table, same) == (
      'The order here repeats the order at 64 (Spearman ρ = 1.00 over 6 rows, p < 0.001): this rank measures the '
      'fit at the training length as much as the extrapolation, which the contrast tests.')
  reversed_order = [row(1.0, 3.2), row(2.0, 2.0), row(3.0, 3.1), row(4.0, 2.5), row(5.0, 3.0), row(6.0, 2.6)]
  rho = scipy.stats.spearmanr([1, 2, 3, 4, 5, 6], [3.2, 2.0, 3.1, 2.5, 3.0, 2.6])
  assert report.rank_agreement(table, reversed_order) == (
      f'The order here is not the order at 64 (Spearman ρ = {rho.statistic:.2f} over 6 rows, '
      f'p = {report.p_cell(rho.pvalue)}).')
  assert report.rank_agreement(table, same[:2] + [row(7.0, None)]) == 'Fewer than 3 rows have 64: no rank correlation.'


def _row(encoding, values, reference_values, *, holm=None, rank=1):
  """A summary row as table_rows gives it, for the answer and the rank figure."""
  stats = {'test accuracy': {'values': values, 'mean': float(np.mean(values))}}
  delta = None if reference_values is None else float(np.mean(values) - np.mean(reference_values))
  return {'encoding': encoding, 'stats': stats, 'rank': rank, 'n': len(values), 'delta': delta,
          'welch_holm_p': holm, 'runs': []}


def test_which_encoding_names_only_what_holm_establishes_and_the_direction_of_each():
  reference = [0.40, 0.41, 0.42]
  rows = [_row('a', [0.90, 0.91, 0.92], reference, holm=0.001, rank=1),
          _row('b', [0.89, 0.93, 0.90], reference, holm=0.20, rank=2),  # Not established after Holm.
          _row('sinusoidal', reference, None, rank=3),
          _row('c', [0.10, 0.11, 0.12], reference, holm=0.01, rank=4)]
  line, = report.which_encoding([(LISTOPS_TABLE, rows, {})])
  assert line.startswith('- **A toy question** (table 1): better than the reference: a (+0.500 against sinusoidal, '
                         'table 1). Worse: c (-0.300 against sinusoidal, table 1).')
  assert 'b (+' not in line and 'First: a ranks first, not separated from b (table 1)' in line
  assert line.endswith('Not established: 1 of 3 differences from sinusoidal (table 1).')
  # Lower is better: a negative difference is the better one; two tables of one question share a line.
  lower = dataclasses.replace(LISTOPS_TABLE, lower_is_better=True, title='Toy loss')
  both = report.which_encoding([(LISTOPS_TABLE, rows, {}), (lower, rows, {})])
  assert len(both) == 1 and '(tables 1, 2)' in both[0] and 'c (-0.300 against sinusoidal, table 2)' in both[0]
  assert both[0].index('c (-0.300 against sinusoidal, table 2)') < both[0].index('Worse')


def test_the_rank_figure_numbers_are_the_tables_ranks_and_marks(tmp_path):
  reference = [0.40, 0.41, 0.42]
  first = [_row('a', [0.9] * 3, reference, holm=0.001, rank=1), _row('sinusoidal', reference, None, rank=2),
           _row('c', [0.1] * 3, reference, holm=0.3, rank=3)]
  second = [_row('sinusoidal', reference, None, rank=1), _row('a', [0.1] * 3, reference, holm=0.01, rank=2)]
  other = dataclasses.replace(LISTOPS_TABLE, title='Other')
  numbers = report.rank_figure([(LISTOPS_TABLE, first, {}), (other, second, {})], str(tmp_path / 'ranks.png'))
  assert numbers['columns'] == ['1. Toy ListOps', '2. Other']
  assert numbers['encodings']['a'] == {'1. Toy ListOps': {'rank': 1, 'of': 3, 'mark': '+'},
                                       '2. Other': {'rank': 2, 'of': 2, 'mark': '-'}}
  assert numbers['encodings']['c'] == {'1. Toy ListOps': {'rank': 3, 'of': 3, 'mark': ''}}
  assert numbers['encodings']['sinusoidal']['2. Other']['mark'] == 'ref'
  # Rows by mean rank fraction (0 first, 1 last): sinusoidal (0.5 and 0), a (0 and 1), c (1).
  assert list(numbers['encodings']) == ['sinusoidal', 'a', 'c']
  with open(tmp_path / 'ranks.json') as f:
    assert json.load(f) == numbers
  assert os.path.getsize(tmp_path / 'ranks.png') > 0



def test_a_study_file_reads_as_the_table_it_declares_and_positions_order_the_studies(listops_tree):
  os.makedirs(os.path.join(listops_tree, 'second', 'runs'))
  for folder, text in (('toy', LISTOPS_STUDY.replace('position = 1', 'position = 2')),
                       ('second', LISTOPS_STUDY.replace('toy/runs', 'second/runs').replace('Toy', 'Second'))):
    with open(os.path.join(listops_tree, folder, study_files.STUDY_FILE), 'w') as f:
      f.write(text)
  first, second = study_files.read_tables(listops_tree)
  assert second == dataclasses.replace(LISTOPS_TABLE, position=2)
  assert first == dataclasses.replace(LISTOPS_TABLE, title='Second ListOps', sources=('second/runs',))


@pytest.mark.parametrize('edit, message', [
    (('metric = ', 'metirc = '), r"table 1: unknown key 'metirc'; valid: position, title, .*, rank_also_at"),
    (('task = "listops"', 'task = "sorting"'), r"task 'sorting' is not a task folder's \(listops, lm, translation\) "
                                               r'nor an importable module'),
    (('task = "listops"', 'task = 7'), r"task = 7 should be a task's name \(listops, lm, translation\)"),
    (('digits = 3', 'digits = "3"'), r"table 1: digits = '3' should be an integer >= 0"),
    (('columns = [["test accuracy", "accuracy"]]', 'columns = [["test accuracy"]]'),
     r'table 1: columns = .* should be a non-empty array of \[column, header\] pairs'),
    (('reference = "sinusoidal"\n', 'statistics = ["best", "test"]\n'), r'table 1: reference is missing'),
    (('reference = "sinusoidal"', 'reference = "sinusoidal"\nstatistics = ["best", "test"]'),
     r"table 1: statistics = \['best', 'test'\] should be an array of 3 strings"),
    (('"toy/runs"', '"toy/run"'), r"table 1: source 'toy/run' is not under "),
    (('title = "Toy ListOps"', 'title = "Toy'), r': .*line 5'),
    ((LISTOPS_STUDY, 'task = "listops"\ntables = [1]\n'), r': no \[\[tables\]\], or tables that are not'),
])
def test_a_bad_study_file_is_one_error_naming_the_file_the_table_and_the_key(listops_tree, edit, message):
  path = os.path.join(listops_tree, 'toy', study_files.STUDY_FILE)
  with open(path, 'w') as f:
    f.write(LISTOPS_STUDY.replace(*edit))
  with pytest.raises(study_files.StudyFileError, match=re.escape(path) + '.*' + message):
    study_files.read_tables(listops_tree)


def test_two_tables_at_one_position_are_refused(listops_tree):
  with open(os.path.join(listops_tree, 'toy', study_files.STUDY_FILE), 'w') as f:
    f.write(LISTOPS_STUDY + LISTOPS_STUDY.split('\n\n', 1)[1].replace('Toy', 'Twin'))
  with pytest.raises(study_files.StudyFileError, match="position 1 is also 'Toy ListOps'"):
    study_files.read_tables(listops_tree)


def test_the_study_files_command_lists_the_tables_or_fails_in_one_line(listops_tree, tmp_path, capsys):
  with open(os.path.join(listops_tree, 'toy', study_files.STUDY_FILE), 'w') as f:
    f.write(LISTOPS_STUDY)
  study_files.main([f'--results_dir={listops_tree}'])
  assert capsys.readouterr().out == '1. Toy ListOps (listops; toy/runs; test accuracy, reference sinusoidal)\n'
  os.makedirs(tmp_path / 'empty' / 'study')
  with pytest.raises(SystemExit) as exited:
    study_files.main([f'--results_dir={tmp_path / "empty"}'])
  assert exited.value.code == 2
  assert capsys.readouterr().err == f'error: {tmp_path / "empty"}: no study.toml in any of its folders\n'
