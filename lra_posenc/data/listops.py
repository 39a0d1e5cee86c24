"""LRA-compatible ListOps generator (Nangia & Bowman 2018, as released with LRA).

    python -m lra_posenc.data.listops --output_dir DIR --seed S

writes DIR/basic_{train,val,test}.tsv with the header `Source<TAB>Target`, then one
`expression<TAB>label` row per line, the expression in LRA's bracketed form, e.g.
`( ( ( [MAX 2 ) 9 ) ] )` for [MAX 2 9] = 9, and last DIR/generator.json, its arguments: a
directory whose generator.json matches is kept as it is.

The tree process and string format follow LRA's generator. Its length is the number of
operator, value and `]` tokens; like LRA it keeps longer_than < length < shorter_than (LRA's
min_length and max_length, renamed to say that both bounds are exclusive).
Unlike LRA it draws from its own seeded `random.Random` and keeps expressions in
insertion order, so the same arguments write the same bytes. Expressions are unique
across the three splits, so the splits are disjoint.
"""
import argparse
import dataclasses
import json
import os
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lra_posenc import progress
from lra_posenc.data.files import written_whole
from lra_posenc.validation import check_range

OPERATORS = ('[MIN', '[MAX', '[MED', '[SM')
END = ']'
VALUE_PROBABILITY = 0.75  # LRA: a node below max_depth is a value unless random() <= 0.25.
SPLITS = ('train', 'val', 'test')
# In-window draws in a row that repeat an expression already held, after which the options are taken to
# allow too few distinct expressions for the request (rather than drawing for ever).
MAX_REPEATED_DRAWS = 1000
# Draws in a row outside the length window, after which the window is taken to hold no expression (shallow
# trees skip lengths: max_depth 3 and max_args 2 reach 4, 7 and 10 tokens, never 8 or 9). The sparsest window
# measured, 250 < length < 500 at max_depth 6 and max_args 8, missed at most 3,522 times in a row in 200 samples.
MAX_DRAWS_OUTSIDE_THE_WINDOW = 10_000_000

Tree = int | tuple


@dataclasses.dataclass(frozen=True)
class GeneratorOptions:
  """LRA's tree shape and length window; `label_modulus` < 10 writes value mod it as the label
  (2: the Chebyshev-PE study's parity task)."""
  max_depth: int = 10
  max_args: int = 10
  longer_than: int = 500
  shorter_than: int = 2000
  label_modulus: int = 10

  def __post_init__(self):
    check_range('label_modulus', self.label_modulus, at_least=2, at_most=10)
    check_range('max_depth', self.max_depth, at_least=1)
    check_range('max_args', self.max_args, at_least=2, why='an operator takes 2 to max_args arguments')
    if self.longer_than + 1 >= min(self.shorter_than, self.longest_tree() + 1):
      raise ValueError(
          f'no expression has longer_than < length < shorter_than ({self.longer_than} < length < {self.shorter_than}): '
          f'with max_depth={self.max_depth} and max_args={self.max_args} the longest has {self.longest_tree()} tokens')

  @classmethod
  def from_spec(cls, spec: Mapping[str, Any], **overrides: int) -> 'GeneratorOptions':
    """The options named in `spec` (a config's `data.generator`, which holds more keys), with `overrides`."""
    return cls(**{f.name: spec[f.name] for f in dataclasses.fields(cls)} | overrides)

  def longest_tree(self) -> int:
    """Tokens in the longest expression these options can generate."""
    length = 1
    for _ in range(max(self.max_depth - 1, 0)):
      length = 2 + self.max_args * length
    return length


def apply_operator(operator: str, args: Sequence[int]) -> int:
  """The value of one ListOps operator; MED is the median truncated to int, as in LRA."""
  if operator == '[MIN':
    return min(args)
  if operator == '[MAX':
    return max(args)
  if operator == '[MED':
    return int(statistics.median(args))
  if operator == '[SM':
    return sum(args) % 10
  raise ValueError(f'unknown ListOps operator {operator!r}')


def evaluate_tokens(tokens: Sequence[str]) -> int:
  """The value of an expression's tokens (operators, digits and ']'; brackets '(' ')' dropped), by a stack."""
  stack: list[str | int] = []
  for token in tokens:
    if token in OPERATORS:
      stack.append(token)
    elif token == END:
      args = []
      while stack and not isinstance(stack[-1], str):
        args.append(stack.pop())
      if not stack or not args:
        raise ValueError(f'unbalanced ListOps expression: {" ".join(tokens)}')
      stack.append(apply_operator(stack.pop(), args[::-1]))
    else:
      stack.append(int(token))
  if len(stack) != 1 or isinstance(stack[0], str):
    raise ValueError(f'not one ListOps expression: {" ".join(tokens)}')
  return stack[0]


def _generate_tree(rng: random.Random, depth: int, options: GeneratorOptions) -> tuple[Tree, int, int]:
  """Returns (tree, token length, value)."""
  if depth >= options.max_depth or rng.random() > 1 - VALUE_PROBABILITY:
    value = rng.randrange(10)
    return value, 1, value
  num_args = rng.randint(2, options.max_args)
  children = [_generate_tree(rng, depth + 1, options) for _ in range(num_args)]
  operator = rng.choice(OPERATORS)
  tree: Tree = (operator, children[0][0])
  for child, _, _ in children[1:]:
    tree = (tree, child)
  length = 2 + sum(child_length for _, child_length, _ in children)
  return (tree, END), length, apply_operator(operator, [value for _, _, value in children])


def to_string(tree: Tree) -> str:
  if isinstance(tree, (int, str)):
    return str(tree)
  return f'( {to_string(tree[0])} {to_string(tree[1])} )'


def generate(num_samples: int, options: GeneratorOptions, rng: random.Random,
             exclude: frozenset = frozenset(), on_sample: Callable[[], None] | None = None) -> dict[str, int]:
  """`num_samples` distinct expressions (not in `exclude`) mapped to their labels; `on_sample()` after each."""
  samples: dict[str, int] = {}
  repeated = outside = 0
  while len(samples) < num_samples:
    tree, length, value = _generate_tree(rng, 1, options)
    outside = 0 if options.longer_than < length < options.shorter_than else outside + 1
    if outside == MAX_DRAWS_OUTSIDE_THE_WINDOW:
      raise ValueError(f'{options}: {outside} draws in a row fell outside {options.longer_than} < length < '
                       f'{options.shorter_than}, {num_samples - len(samples)} expressions short of the request; '
                       'these options reach few or no lengths there (widen the window, or raise max_depth or '
                       'max_args)')
    if not outside:
      expression = to_string(tree)
      if expression in exclude or expression in samples:
        repeated += 1
        if repeated == MAX_REPEATED_DRAWS:
          raise ValueError(f'{options} allow too few distinct expressions: {MAX_REPEATED_DRAWS} draws in a '
                           f'row repeated one of the {len(exclude) + len(samples)} already drawn, '
                           f'{num_samples - len(samples)} short of the request (widen the length window or '
                           'raise max_depth or max_args)')
        continue
      repeated = 0
      samples[expression] = value % options.label_modulus
      if on_sample:
        on_sample()
  return samples


def write_splits(output_dir: str, seed: int, sizes: dict[str, int], options: GeneratorOptions) -> dict[str, str]:
  """Writes basic_{split}.tsv for every split; returns their paths."""
  rng = random.Random(seed)
  os.makedirs(output_dir, exist_ok=True)
  seen: set[str] = set()
  paths = {}
  for split in SPLITS:
    with progress.Progress(f'generating ListOps {split}', sizes[split], unit='expressions') as report:
      samples = generate(sizes[split], options, rng, exclude=frozenset(seen), on_sample=report.update)
    seen.update(samples)
    paths[split] = os.path.join(output_dir, f'basic_{split}.tsv')
    write_tsv(paths[split], samples)
  return paths


def write_tsv(path: str, samples: dict[str, int]) -> None:
  """LRA's `Source<TAB>Target` file of `samples`, written whole or not at all."""
  with written_whole(path, encoding='utf-8', newline='\n') as f:
    f.write('Source\tTarget\n')
    f.writelines(f'{expression}\t{label}\n' for expression, label in samples.items())


def write_unless_present(output_dir: str, spec: Mapping[str, int]) -> bool:
  """Writes the splits `spec` (a config's `data.generator`) describes, unless `output_dir/generator.json`
  says they are there already; returns whether it wrote them. The spec is written last, so a directory
  that holds it holds every split."""
  spec = dict(spec)
  spec_path = os.path.join(output_dir, 'generator.json')
  if os.path.exists(spec_path):
    with open(spec_path) as f:
      if json.load(f) == spec:
        return False
  options = GeneratorOptions.from_spec(spec)
  sizes = dict(train=spec['num_train_samples'], val=spec['num_valid_samples'], test=spec['num_test_samples'])
  write_splits(output_dir, spec['seed'], sizes, options)
  with written_whole(spec_path) as f:  # Last, and whole: its presence says every split is.
    json.dump(spec, f, indent=2, sort_keys=True)
  return True


def main(argv: Sequence[str] | None = None) -> None:
  defaults = GeneratorOptions()
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--output_dir', required=True)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--num_train_samples', type=int, default=96000)
  parser.add_argument('--num_valid_samples', type=int, default=2000)
  parser.add_argument('--num_test_samples', type=int, default=2000)
  for field in dataclasses.fields(GeneratorOptions):
    parser.add_argument(f'--{field.name}', type=int, default=getattr(defaults, field.name))
  spec = vars(parser.parse_args(argv))
  output_dir = spec.pop('output_dir')
  wrote = write_unless_present(output_dir, spec)
  print(f'{"wrote" if wrote else "kept the matching"} basic_{{{",".join(SPLITS)}}}.tsv in {output_dir}: {spec}')


if __name__ == '__main__':
  main()
