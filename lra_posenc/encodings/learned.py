"""Learned absolute position embeddings: a trainable [max_len, dim] table."""
import dataclasses

import flax.linen as nn

from lra_posenc.encodings import base
from lra_posenc.validation import check_range


@dataclasses.dataclass(frozen=True)
class LearnedOptions:
  init_std: float = 0.02

  def __post_init__(self):
    check_range('init_std', self.init_std, at_least=0)


@base.register('learned')
class LearnedEncoding(base.PositionalEncoding):
  options: LearnedOptions = LearnedOptions()

  @nn.compact
  def add_to_inputs(self, x: base.Array, positions: base.Array) -> base.Array:
    base.check_capacity('learned', x.shape[1], self.max_len)
    table = self.param('table', nn.initializers.normal(self.options.init_std), (self.max_len, self.dim))
    return x + base.lookup(table, positions).astype(x.dtype)
