"""Label-preserving ListOps augmentation of training batches (`data.augment`), off by default.

MIN, MAX, MED and SM ignore the order of their arguments, so permuting the arguments of a
list keeps its value (`shuffle_arguments`); a list can be replaced by the digit it
evaluates to (`contract_subtrees`), which shortens the input. Either keeps the expression's
value, so its label, exactly. Each example's changes are a pure function of (seed, step,
row of the global batch), so a resumed run, or one split over other hosts, sees the same
batches.
"""
import dataclasses
from collections.abc import Iterator

import numpy as np

from lra_posenc.data import listops as generator
from lra_posenc.listops.input_pipeline import END_ID, OPERATOR_IDS, PAD_ID, TOKEN_IDS
from lra_posenc.training.batches import Batch
from lra_posenc.validation import check_range

_DIGIT_IDS = [TOKEN_IDS[str(d)] for d in range(10)]
_DIGIT_VALUES = {token_id: digit for digit, token_id in enumerate(_DIGIT_IDS)}
_OPERATOR_NAMES = {token_id: name for name, token_id in OPERATOR_IDS.items()}
_STREAM = 0xA06  # Separates these draws from the batch order's, which share the run's seed.

# A list: (operator id, arguments), each argument a digit id or a list.
Node = int | tuple


@dataclasses.dataclass(frozen=True)
class AugmentSettings:
  """`data.augment`: the probability of permuting a list's arguments, and of replacing a list below the root by
  its value. Raises ValueError naming a probability outside [0, 1]."""
  shuffle_arguments: float = 0.0
  contract_subtrees: float = 0.0

  def __post_init__(self):
    for field in dataclasses.fields(self):
      check_range(f'data.augment.{field.name}', getattr(self, field.name), at_least=0, at_most=1, why='a probability')

  @property
  def active(self) -> bool:
    return self.shuffle_arguments > 0 or self.contract_subtrees > 0


KEYS = tuple(field.name for field in dataclasses.fields(AugmentSettings))


def parse(ids: np.ndarray) -> Node:
  """The tree of one expression's token ids (padding ignored)."""
  stack: list[list] = [[None, []]]
  for token_id in ids[ids != PAD_ID].tolist():
    if token_id in _OPERATOR_NAMES:
      stack.append([token_id, []])
    elif token_id == END_ID:
      operator, arguments = stack.pop()
      stack[-1][1].append((operator, arguments))
    else:
      stack[-1][1].append(token_id)
  (root,) = stack[0][1]
  return root


def serialize(node: Node) -> list[int]:
  if isinstance(node, int):
    return [node]
  operator, arguments = node
  return [operator] + [token_id for argument in arguments for token_id in serialize(argument)] + [END_ID]


def value(node: Node) -> int:
  if isinstance(node, int):
    return _DIGIT_VALUES[node]
  operator, arguments = node
  return generator.apply_operator(_OPERATOR_NAMES[operator], [value(argument) for argument in arguments])


def augment_expression(ids: np.ndarray, rng: np.random.Generator, *, shuffle_arguments: float,
                       contract_subtrees: float) -> np.ndarray:
  """`ids` (padded to their length) with lists below the root contracted to their value, each with
  probability `contract_subtrees`, and the arguments of each remaining list permuted with probability
  `shuffle_arguments`."""

  def visit(node: Node, is_root: bool) -> Node:
    if isinstance(node, int):
      return node
    if not is_root and rng.random() < contract_subtrees:
      return _DIGIT_IDS[value(node)]
    operator, arguments = node
    arguments = [visit(argument, False) for argument in arguments]
    if rng.random() < shuffle_arguments:
      arguments = [arguments[i] for i in rng.permutation(len(arguments))]
    return operator, arguments

  augmented = serialize(visit(parse(ids), True))
  out = np.full_like(ids, PAD_ID)
  out[:len(augmented)] = augmented
  return out


def augmented_batches(batches: Iterator[Batch], augment: AugmentSettings, *, seed: int, start: int,
                      first_row: int) -> Iterator[Batch]:
  """`batches` (global batch `start` on; this host's rows begin at `first_row` of each) augmented."""
  for step, batch in enumerate(batches, start=start):
    inputs = np.stack([
        augment_expression(row, np.random.default_rng([seed, _STREAM, step, first_row + i]),
                           shuffle_arguments=augment.shuffle_arguments, contract_subtrees=augment.contract_subtrees)
        for i, row in enumerate(batch['inputs'])])
    yield batch | {'inputs': inputs}
