"""Paired BLEU tests (lra_posenc/translation/bleu.py, significance.py): sacreBLEU's tests,
run on the sentence statistics a run records, scored as the trainer scores."""
import concurrent.futures
import json
import os
import random

import numpy as np
import pytest
import sacrebleu.significance

from conftest import toy_config
from lra_posenc.translation import bleu, significance, train
from lra_posenc.translation.settings import read_data


def write_run(run_dir, config, translations: dict[str, list[str]]) -> str:
  """A run directory as training left it before it recorded statistics: config.json, translations/test.de
  (best) and translations/averaged/test.de."""
  os.makedirs(run_dir, exist_ok=True)
  with open(os.path.join(run_dir, 'config.json'), 'w') as f:
    json.dump(config.to_dict(), f)
  for checkpoint, lines in translations.items():
    path = train.translations_path(str(run_dir), 'test', 'de', checkpoint)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
      f.writelines(line + '\n' for line in lines)
  return str(run_dir)


@pytest.fixture
def references(toy_corpus) -> list[str]:
  return train.read_text(read_data(toy_config(toy_corpus).data), 'test').targets


def drop_last_word(line: str) -> str:
  return ' '.join(line.split()[:-1])


def noisy_copies(references: list[str], count: int, seed: int = 0) -> list[list[str]]:
  """Systems that drop and reorder words of the references at random, each a little worse than the last."""
  rng = random.Random(seed)
  systems = []
  for i in range(count):
    system = []
    for line in references:
      words = [word for word in line.split() if rng.random() > 0.1 + 0.05 * i] or line.split()[:1]
      if rng.random() < 0.3:
        rng.shuffle(words)
      system.append(' '.join(words))
    systems.append(system)
  return systems


@pytest.mark.parametrize('test', ['bootstrap', 'randomization'])
def test_paired_tests_on_sentence_statistics_are_sacrebleus_on_the_text(toy_corpus, references, test):
  """The same resamples give the same p-values; means and intervals agree to float32 rounding (sacreBLEU
  sums its bootstrap statistics in float32: 7 significant digits of a BLEU near 50)."""
  systems = noisy_copies(references, 3) + [references]
  for name, protocol in bleu.protocols(read_data(toy_config(toy_corpus).data)).items():
    statistics = [protocol.sentence_statistics(system, references) for system in systems]
    ours = bleu.paired_test(protocol, statistics, test, samples=300)
    signatures, theirs = sacrebleu.significance.PairedTest(
        [(str(i), protocol.prepare(system)) for i, system in enumerate(systems)], {name: protocol.metric},
        [protocol.prepare(references)], test_type=bleu.PAIRED_TESTS[test], n_samples=300)()
    (metric_name,) = signatures
    assert bleu.paired_signature(protocol, test, 300) == protocol.signature(signatures[metric_name])
    for mine, expected in zip(ours, theirs[metric_name], strict=True):
      assert mine.score == pytest.approx(expected.score, abs=1e-9)
      assert mine.p_value == expected.p_value
      assert (mine.mean is None) == (expected.mean is None) == (test == 'randomization')
      if mine.mean is not None:
        assert (mine.mean, mine.ci95) == pytest.approx((expected.mean, expected.ci), abs=1e-4)
    assert ours[-1].p_value < 0.01  # The references themselves against the baseline, a noisy copy.


def test_sentence_statistics_sum_to_the_corpus_bleu(toy_corpus, references):
  (system,) = noisy_copies(references, 1)
  for protocol in bleu.protocols(read_data(toy_config(toy_corpus).data)).values():
    statistics = protocol.sentence_statistics(system, references)
    assert statistics.shape == (len(references), len(bleu.STATISTICS_FIELDS))
    assert protocol.score_of_sums(statistics.sum(0)) == pytest.approx(protocol.score(system, references), abs=1e-9)
    # Row by row: a sentence's statistics are those of the one-sentence corpus.
    assert protocol.score_of_sums(statistics[3]) == pytest.approx(protocol.score(system[3:4], references[3:4]))


def test_scores_are_the_trainers_and_only_a_real_difference_is_significant(toy_corpus, references, tmp_path):
  config = toy_config(toy_corpus)
  degraded = [drop_last_word(line) for line in references]
  one_changed = [drop_last_word(references[0])] + references[1:]
  capitalised = [line[:1].upper() + line[1:] for line in references]
  exact = write_run(tmp_path / 'exact', config, {'best': references, 'averaged': references})
  worse = write_run(tmp_path / 'worse', config, {'best': degraded, 'averaged': one_changed})
  cased = write_run(tmp_path / 'cased', config, {'best': capitalised})
  systems = [exact, worse, f'{worse}:averaged', f'{exact}:averaged', cased]
  report = significance.compare(systems, toy_corpus)

  for name in ('bleu', 'tokenized_bleu'):
    rows = report['splits']['test'][name]['systems']
    assert [row['system'] for row in rows] == systems
    for row, lines in zip(rows, (references, degraded, one_changed, references, capitalised)):
      assert row['score'] == pytest.approx(bleu.scores(lines, references, read_data(config.data))[name])
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


def test_recorded_statistics_compare_runs_without_translations_or_data(toy_corpus, references, tmp_path):
  config = toy_config(toy_corpus)
  better, worse = noisy_copies(references, 2, seed=1)
  runs = [write_run(tmp_path / name, config, {'best': lines, 'averaged': references})
          for name, lines in (('worse', worse), ('better', better))]
  systems = [runs[0], runs[1], f'{runs[1]}:averaged']
  from_text = significance.compare(systems, toy_corpus, save_statistics=True)
  for run in runs:  # Left: config.json and bleu_statistics.json; and the test data are not where they were.
    for checkpoint in ('best', 'averaged'):
      os.remove(train.translations_path(run, 'test', 'de', checkpoint))
  assert significance.compare(systems, str(tmp_path / 'absent')) == from_text
  assert from_text['splits']['test']['tokenized_bleu']['systems'][1]['score'] > (
      from_text['splits']['test']['tokenized_bleu']['systems'][0]['score'])
  # What the script saved is what training records.
  protocol = bleu.tokenized_bleu_protocol('de')
  saved = bleu.read_statistics(runs[1], 'averaged', 'test', 'tokenized_bleu', protocol)
  bleu.record_statistics(str(tmp_path), 'averaged', 'test', references, references, read_data(config.data))
  recorded = bleu.read_statistics(str(tmp_path), 'averaged', 'test', 'tokenized_bleu', protocol)
  assert saved.score == recorded.score == pytest.approx(100)
  np.testing.assert_array_equal(saved.statistics, recorded.statistics)
  assert bleu.read_statistics(runs[1], 'averaged', 'validation', 'tokenized_bleu', protocol) is None


def test_statistics_recorded_at_once_by_many_writers_are_all_kept(toy_corpus, references, tmp_path):
  """Several scorings of one run at once (significance scripts beside a run's own testing) each add their
  entry to its bleu_statistics.json; none replaces another's."""
  data = read_data(toy_config(toy_corpus).data)
  splits = [f'split_{i}' for i in range(16)]
  with concurrent.futures.ThreadPoolExecutor(len(splits)) as pool:
    list(pool.map(lambda split: bleu.record_statistics(str(tmp_path), 'best', split, references[:4], references[:4],
                                                       data), splits))
  with open(tmp_path / bleu.STATISTICS_FILE) as f:
    assert sorted(json.load(f)['checkpoints']['best']) == sorted(splits)
  assert not [name for name in os.listdir(tmp_path) if name.endswith('.tmp')]


def test_recorded_statistics_that_do_not_add_up_are_errors(toy_corpus, references, tmp_path):
  (system,) = noisy_copies(references, 1)
  bleu.record_statistics(str(tmp_path), 'best', 'test', system, references, read_data(toy_config(toy_corpus).data))
  path = tmp_path / bleu.STATISTICS_FILE
  with open(path) as f:
    content = json.load(f)
  content['checkpoints']['best']['test']['bleu']['statistics'][0][2] += 1  # One more unigram matched.
  with open(path, 'w') as f:
    json.dump(content, f)
  with pytest.raises(ValueError, match=r'best, test, bleu: the statistics give BLEU .* not the recorded'):
    bleu.read_statistics(str(tmp_path), 'best', 'test', 'bleu', bleu.sacrebleu_protocol())
  with pytest.raises(ValueError, match=r'recorded with moses:de\|.* not nrefs:1\|case:mixed'):
    bleu.read_statistics(str(tmp_path), 'best', 'test', 'tokenized_bleu', bleu.sacrebleu_protocol())


def test_randomization_test_and_the_command_line(toy_corpus, references, tmp_path, capsys):
  config = toy_config(toy_corpus)
  exact = write_run(tmp_path / 'exact', config, {'best': references})
  worse = write_run(tmp_path / 'worse', config, {'best': [drop_last_word(line) for line in references]})
  output = tmp_path / 'report.json'
  significance.main([exact, worse, f'--data_dir={toy_corpus}', '--test=randomization', '--samples=500',
                     f'--output={output}'])
  with open(output) as f:
    report = json.load(f)
  rows = report['splits']['test']['tokenized_bleu']['systems']
  assert rows[1]['p_value'] < 0.01 and rows[1]['mean'] is None
  assert 'ar:500' in report['splits']['test']['tokenized_bleu']['signature']
  assert f'| {worse} | {rows[1]["score"]:.2f} | n/a | {rows[1]["p_value"]:.4f} |' in capsys.readouterr().out
  assert not os.path.exists(os.path.join(worse, bleu.STATISTICS_FILE))  # Saved only when asked.


def test_runs_that_cannot_be_compared_are_errors_naming_why(toy_corpus, references, tmp_path):
  """Without a data_dir, the references come from the baseline's own config.data.data_dir."""
  config = toy_config(toy_corpus)
  exact = write_run(tmp_path / 'exact', config, {'best': references})
  cased = toy_config(toy_corpus)
  cased.data.tokenizer.lowercase = not config.data.tokenizer.lowercase
  other = write_run(tmp_path / 'other', cased, {'best': references})
  with pytest.raises(ValueError, match='data.tokenizer.lowercase'):
    significance.compare([exact, other])
  with pytest.raises(FileNotFoundError, match=r'neither bleu_statistics.json nor translations \(.*averaged/test\.de\)'):
    significance.compare([exact, f'{exact}:averaged'])
  short = write_run(tmp_path / 'short', config, {'best': references[:-1]})
  with pytest.raises(ValueError, match=f'{len(references) - 1} translations for {len(references)} references'):
    significance.compare([exact, short])
  # Recorded statistics of fewer sentences than the baseline's: no paired test.
  bleu.record_statistics(str(tmp_path / 'short'), 'best', 'test', references[:-1], references[:-1],
                         read_data(config.data))
  with pytest.raises(ValueError, match=f'short: {len(references) - 1} sentences of test; .* has {len(references)}'):
    significance.compare([exact, short])
  with pytest.raises(ValueError, match=r"test 'permutation'; valid: \['bootstrap', 'randomization'\]"):
    significance.compare([exact, exact], test='permutation')
  with pytest.raises(ValueError, match='samples -1'):
    significance.compare([exact, exact], samples=-1)
  with pytest.raises(ValueError, match=r"'last'; valid: \['best', 'averaged'\]"):
    significance.compare([exact, f'{exact}:last'])
  with pytest.raises(ValueError, match='a baseline and at least one system'):
    significance.compare([exact])


def test_the_two_sided_bootstrap_is_its_definition_on_the_text(toy_corpus, references):
  """Resample the sentences as sacreBLEU does, score each resample's corpus with sacreBLEU itself, centre the
  signed differences: the p-value is the share beyond the observed difference in either direction."""
  baseline, system = noisy_copies(references, 2)
  for protocol in bleu.protocols(read_data(toy_config(toy_corpus).data)).values():
    statistics = [protocol.sentence_statistics(lines, references) for lines in (baseline, system)]
    samples = 200
    draws = np.random.default_rng(bleu.SEED).choice(len(references), size=(samples, len(references)), replace=True)
    score = lambda lines, rows: protocol.metric.corpus_score(
        protocol.prepare([lines[i] for i in rows]), [protocol.prepare([references[i] for i in rows])]).score
    differences = np.array([score(system, rows) - score(baseline, rows) for rows in draws])
    observed = score(system, range(len(references))) - score(baseline, range(len(references)))
    expected = (np.sum(np.abs(differences - differences.mean()) > abs(observed)) + 1) / (samples + 1)
    assert bleu.two_sided_bootstrap(protocol, *statistics, samples=samples) == pytest.approx(expected, abs=1e-12)
    # Two-sided: which system is the baseline does not matter; a system against itself is p = 1.
    assert bleu.two_sided_bootstrap(protocol, *statistics[::-1], samples=samples) == pytest.approx(expected)
    assert bleu.two_sided_bootstrap(protocol, statistics[0], statistics[0], samples=samples) == 1.0
