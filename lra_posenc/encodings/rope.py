"""Rotary position embedding (Su et al. 2021) on the queries and keys of every head."""
import dataclasses
from typing import ClassVar

import jax.numpy as jnp

from lra_posenc.encodings import base
from lra_posenc.validation import check_range


@dataclasses.dataclass(frozen=True)
class RopeOptions:
  base: float = 10000.0

  def __post_init__(self):
    check_range('base', self.base, above=1, why='wavelengths grow from 2 pi to 2 pi base')


class RopeEncoding(base.PositionalEncoding):
  options: RopeOptions = RopeOptions()
  Options: ClassVar[type] = RopeOptions

  @classmethod
  def check_model(cls, options: RopeOptions, *, max_len: int, head_dim: int) -> None:
    del options, max_len
    if head_dim % 2:
      raise ValueError(f'model.pos_encoding=rope needs an even head dimension; model.qkv_dim / model.num_heads = '
                       f'{head_dim}')

  def rotary(self, positions: base.Array) -> base.Rotary:
    if self.head_dim % 2:
      raise ValueError(f'rope needs an even head dimension, got {self.head_dim}')
    exponents = jnp.arange(0, self.head_dim, 2, dtype=jnp.float32) / self.head_dim
    inverse_frequencies = self.options.base ** -exponents
    angles = positions.astype(jnp.float32)[..., None, None] * inverse_frequencies
    return base.Rotary(sin=jnp.sin(angles), cos=jnp.cos(angles))

  def attention_terms(self, query_positions, key_positions, *, causal):
    del causal
    return base.AttentionTerms(query_rotary=self.rotary(query_positions), key_rotary=self.rotary(key_positions))
