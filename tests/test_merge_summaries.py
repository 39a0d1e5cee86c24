"""length_generalisation.merge_length_summaries and its --merge: one table from several length or depth
summaries, every cell traceable."""
import json
import os

import pytest

from lra_posenc.studies import length_generalisation
from lra_posenc.studies.length_generalisation import merge_length_summaries


def cell(*values):
  return {'values': list(values), 'examples': 10, 'mean': sum(values) / len(values), 'std': None}


LENGTH = {'buckets': ['test', '64-127'], 'majority_class': {'test': 0.2, '64-127': 0.3},
          'variants': {'rope': {'test': cell(0.5), '64-127': cell(0.25)}, 'alibi': {'test': cell(0.4),
                                                                                   '64-127': cell(0.35)}}}
DEPTH = {'buckets': ['2', '3'], 'majority_class': {'2': 0.1, '3': 0.15},
         'variants': {'alibi': {'2': cell(0.6), '3': cell(0.45)}, 'none': {'2': cell(0.3), '3': cell(0.2)}}}
OTHER = {'buckets': ['test'], 'majority_class': {'test': 0.2}, 'variants': {'rope': {'test': cell(0.9)}}}


def test_each_cell_is_the_first_summarys_and_its_sources_are_named():
  merged = merge_length_summaries({'length': LENGTH, 'depth': DEPTH, 'other': OTHER})
  assert merged['buckets'] == ['test', '64-127', '2', '3']
  assert list(merged['variants']) == ['rope', 'alibi', 'none']
  assert merged['variants']['rope'] == LENGTH['variants']['rope']  # Not OTHER's later 0.9.
  assert merged['variants']['alibi'] == {**LENGTH['variants']['alibi'], **DEPTH['variants']['alibi']}
  assert merged['sources'] == {'rope': ['length'], 'alibi': ['length', 'depth'], 'none': ['depth']}
  assert merged['majority_class'] == {'test': 0.2, '64-127': 0.3, '2': 0.1, '3': 0.15}


def test_variants_keeps_the_order_asked_and_names_what_is_missing():
  merged = merge_length_summaries({'length': LENGTH, 'depth': DEPTH}, ['none', 'rope'])
  assert list(merged['variants']) == ['none', 'rope']
  with pytest.raises(ValueError, match=r"\['kerple_log'\].*'alibi', 'none', 'rope'"):
    merge_length_summaries({'length': LENGTH, 'depth': DEPTH}, ['rope', 'kerple_log'])


def test_a_bucket_scored_on_different_sets_is_refused():
  other_set = {**OTHER, 'majority_class': {'test': 0.25}}
  with pytest.raises(ValueError, match="other: bucket 'test' has majority class 0.25"):
    merge_length_summaries({'length': LENGTH, 'other': other_set})


def test_the_script_writes_the_table_and_the_json(tmp_path):
  paths = []
  for name, summary in (('length', LENGTH), ('depth', DEPTH)):
    os.makedirs(tmp_path / name)
    paths.append(str(tmp_path / name / 'summary.json'))
    with open(paths[-1], 'w') as f:
      json.dump(summary, f)
  length_generalisation.main(['--merge', *paths, f'--report_dir={tmp_path / "merged"}'])
  table = (tmp_path / 'merged' / 'summary.md').read_text()
  assert '| alibi | 0.400 | 0.350 | 0.600 | 0.450 |' in table
  assert '| none |  |  | 0.300 | 0.200 |' in table
  assert f"- alibi: {tmp_path / 'length'}, {tmp_path / 'depth'}" in table
  with open(tmp_path / 'merged' / 'summary.json') as f:
    assert json.load(f)['sources']['none'] == [str(tmp_path / 'depth')]
