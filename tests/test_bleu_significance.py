"""scripts/bleu_significance.py: paired tests of saved translations, scored as the trainer scores them."""
import json
import os
import sys

import pytest

from conftest import toy_config
from lra_posenc.translation import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'scripts'))

import bleu_significance  # noqa: E402


def write_run(run_dir, config, translations: dict[str, list[str]]) -> str:
  """A run directory as training leaves it: config.json, translations/test.de (best) and
  translations/averaged/test.de."""
  os.makedirs(run_dir, exist_ok=True)
  with open(os.path.join(run_dir, 'config.json'), 'w') as f:
    json.dump(config.to_dict(), f)
  for checkpoint, lines in translations.items():
    path = os.path.join(run_dir, 'translations', *(('averaged',) if checkpoint == 'averaged' else ()), 'test.de')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
      f.writelines(line + '\n' for line in lines)
  return str(run_dir)


@pytest.fixture
def references(toy_corpus) -> list[str]:
  return train.read_text(toy_config(toy_corpus).data, 'test').targets


def drop_last_word(line: str) -> str:
  return ' '.join(line.split()[:-1])


def test_scores_are_the_trainers_and_only_a_real_difference_is_significant(toy_corpus, references, tmp_path):
  config = toy_config(toy_corpus)
  degraded = [drop_last_word(line) for line in references]
  one_changed = [drop_last_word(references[0])] + references[1:]
  capitalised = [line[:1].upper() + line[1:] for line in references]
  exact = write_run(tmp_path / 'exact', config, {'best': references, 'averaged': references})
  worse = write_run(tmp_path / 'worse', config, {'best': degraded, 'averaged': one_changed})
  cased = write_run(tmp_path / 'cased', config, {'best': capitalised})
  systems = [exact, worse, f'{worse}:averaged', f'{exact}:averaged', cased]
  report = bleu_significance.compare(systems, toy_corpus)

  for name in ('bleu', 'tokenized_bleu'):
    rows = report['splits']['test'][name]['systems']
    assert [row['system'] for row in rows] == systems
    for row, lines in zip(rows, (references, degraded, one_changed, references, capitalised)):
      assert row['score'] == pytest.approx(train.bleu_scores(lines, references, config.data)[name])
    baseline, every_line_worse, one_line_worse, identical, other_case = rows
    assert baseline['score'] == pytest.approx(100) and baseline['p_value'] is None
    assert every_line_worse['p_value'] < 0.01
    assert one_line_worse['score'] < 100 and one_line_worse['p_value'] > 0.05
    assert identical['p_value'] == 1.0
    # Case is all the capitalised copy changes; the tokenized BLEU lowercases, the toy's sacreBLEU does not.
    assert (other_case['score'] == pytest.approx(100)) == (name == 'tokenized_bleu')
    assert (other_case['p_value'] == 1.0) == (name == 'tokenized_bleu')
    assert every_line_worse['mean'] - every_line_worse['ci95'] < every_line_worse['score'] < (
        every_line_worse['mean'] + every_line_worse['ci95'])


def test_randomization_test_and_the_command_line(toy_corpus, references, tmp_path, capsys):
  config = toy_config(toy_corpus)
  exact = write_run(tmp_path / 'exact', config, {'best': references})
  worse = write_run(tmp_path / 'worse', config, {'best': [drop_last_word(line) for line in references]})
  output = tmp_path / 'report.json'
  bleu_significance.main([exact, worse, f'--data_dir={toy_corpus}', '--test=randomization', '--samples=500',
                          f'--output={output}'])
  with open(output) as f:
    report = json.load(f)
  rows = report['splits']['test']['tokenized_bleu']['systems']
  assert rows[1]['p_value'] < 0.01 and rows[1]['mean'] is None
  assert 'ar:500' in report['splits']['test']['tokenized_bleu']['signature']
  assert f'| {worse} | {rows[1]["score"]:.2f} | n/a | {rows[1]["p_value"]:.4f} |' in capsys.readouterr().out


def test_runs_that_cannot_be_compared_are_errors_naming_why(toy_corpus, references, tmp_path):
  """Without a data_dir, the references come from the baseline's own config.data.data_dir."""
  config = toy_config(toy_corpus)
  exact = write_run(tmp_path / 'exact', config, {'best': references})
  cased = toy_config(toy_corpus)
  cased.data.tokenizer.lowercase = not config.data.tokenizer.lowercase
  other = write_run(tmp_path / 'other', cased, {'best': references})
  with pytest.raises(ValueError, match='data.tokenizer.lowercase'):
    bleu_significance.compare([exact, other])
  with pytest.raises(FileNotFoundError, match=r'averaged/test\.de: no translations'):
    bleu_significance.compare([exact, f'{exact}:averaged'])
  short = write_run(tmp_path / 'short', config, {'best': references[:-1]})
  with pytest.raises(ValueError, match=f'{len(references) - 1} translations for {len(references)} references'):
    bleu_significance.compare([exact, short])
  with pytest.raises(ValueError, match=r"test 'permutation'; valid: \['bootstrap', 'randomization'\]"):
    bleu_significance.compare([exact, exact], test='permutation')
  with pytest.raises(ValueError, match=r"'last'; valid: \['best', 'averaged'\]"):
    bleu_significance.compare([exact, f'{exact}:last'])
  with pytest.raises(ValueError, match='a baseline and at least one system'):
    bleu_significance.compare([exact])
