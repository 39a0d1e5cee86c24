"""The run record a checkpoint carries: its JSON round trip, resumability, best selection."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lra_posenc.training.checkpointing import RunRecord, RunSpan, check_resumable

FRESH = RunRecord(rng=[0, 42], model={'num_layers': 2, 'pos_encoding': 'rope'}, artifacts={'vocabulary': ['a']})


@given(st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_the_best_evaluation_is_the_first_highest_and_the_count_since_it_is_what_follows(scores):
  record = FRESH
  for step, score in enumerate(scores, start=1):
    record = record.after_evaluation(step * 100, {'accuracy': score, 'loss': -score}, 'accuracy')
  first_highest = int(np.argmax(scores))  # NumPy's argmax returns the first of equal maxima.
  assert record.best.step == (first_highest + 1) * 100
  assert record.best.validation == {'accuracy': scores[first_highest], 'loss': -scores[first_highest]}
  assert record.evaluations_since_best == len(scores) - 1 - first_highest
  assert record.out_of_patience(len(scores) - 1 - first_highest) == (first_highest < len(scores) - 1)
  assert not record.out_of_patience(0)  # 0: no early stopping.


def test_a_record_survives_its_json_as_a_checkpoint_saves_it():
  record = FRESH.after_evaluation(100, {'accuracy': 0.5}, 'accuracy').after_evaluation(200, {'accuracy': 0.4},
                                                                                          'accuracy')
  record = record.with_run(RunSpan(0, 200, 12.5, 3.0)).with_run(RunSpan(200, 300, 4.0, 0.5))
  assert RunRecord.from_json(record.to_json()) == record


def test_a_checkpoint_of_another_model_or_vocabulary_is_refused_by_key():
  check_resumable(FRESH, 'accuracy', 10, FRESH.to_json())
  with pytest.raises(ValueError, match=r"differing keys: model.num_layers \(3 -> 2\)"):
    check_resumable(FRESH, 'accuracy', 10, FRESH.to_json() | {'model': FRESH.model | {'num_layers': 3}})
  with pytest.raises(ValueError, match='different task artifacts'):
    check_resumable(FRESH, 'accuracy', 10, FRESH.to_json() | {'artifacts': {'vocabulary': ['b']}})


def test_a_checkpoint_whose_best_was_chosen_by_another_metric_is_refused_naming_both():
  record = FRESH.after_evaluation(100, {'accuracy': 0.62, 'bleu': 21.5}, 'bleu')
  check_resumable(FRESH, 'bleu', 100, record.to_json())
  with pytest.raises(ValueError, match=r"best evaluation \(step 100\) by validation bleu, but "
                                       r"evaluation.selection_metric='accuracy'"):
    check_resumable(FRESH, 'accuracy', 100, record.to_json())
