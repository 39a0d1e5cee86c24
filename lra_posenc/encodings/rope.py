"""Rotary position embedding (Su et al. 2021) on the queries and keys of every head.

Options for longer inputs than trained on: `fraction` rotates only the first fraction of
each head's features (rounded down to an even count; GPT-NeoX's rotary_pct), leaving the
rest position-free; `interpolation_factor` divides positions by the factor (Chen et al.
2023, position interpolation), so L x factor positions take the angles L did; `ntk_factor`
raises the base to base * factor^(r / (r - 2)), r the rotated features (the "NTK-aware"
scaling): the fastest-turning pair keeps its wavelength and the slowest stretches by the factor.
"""
import dataclasses

import jax
import jax.numpy as jnp

from lra_posenc.encodings import base
from lra_posenc.encodings.base import Rotary
from lra_posenc.validation import check_range


@dataclasses.dataclass(frozen=True)
class RopeOptions:
  base: float = 10000.0
  fraction: float = 1.0
  interpolation_factor: float = 1.0
  ntk_factor: float = 1.0

  def __post_init__(self):
    check_range('base', self.base, above=1, why='wavelengths grow from 2 pi to 2 pi base')
    check_range('fraction', self.fraction, above=0, at_most=1)
    check_range('interpolation_factor', self.interpolation_factor, at_least=1)
    check_range('ntk_factor', self.ntk_factor, at_least=1)

  def rotated_features(self, head_dim: int) -> int:
    """How many of a head's features turn: `fraction` of them, rounded down to whole pairs."""
    return int(self.fraction * head_dim) // 2 * 2

  def scaled_base(self, rotated: int) -> float:
    """`base` with NTK-aware scaling, base x ntk_factor^(r / (r - 2)); one pair (r = 2) turns at 1 whatever it is."""
    return self.base * self.ntk_factor ** (rotated / (rotated - 2)) if rotated > 2 else self.base


def check_even_head_dim(name: str, head_dim: int) -> None:
  if head_dim % 2:
    raise ValueError(f'model.pos_encoding={name} needs an even head dimension; model.qkv_dim / model.num_heads = '
                     f'{head_dim}')


def rotation(positions: jax.Array, *, rotated: int, base: float) -> Rotary:
  """RoPE's turn of `rotated` features per head at (possibly fractional) `positions`: pair k by
  position x base^(-2k / rotated)."""
  if rotated % 2:
    raise ValueError(f'rotary encodings turn feature pairs; got {rotated} features')
  inverse_frequencies = base ** -(jnp.arange(0, rotated, 2, dtype=jnp.float32) / rotated)
  angles = positions.astype(jnp.float32)[..., None, None] * inverse_frequencies
  return Rotary(sin=jnp.sin(angles), cos=jnp.cos(angles))


@base.register('rope')
class RopeEncoding(base.PositionalEncoding):
  options: RopeOptions = RopeOptions()

  @classmethod
  def check_model(cls, options: RopeOptions, *, max_len: int, head_dim: int) -> None:
    del max_len
    check_even_head_dim('rope', head_dim)
    if options.rotated_features(head_dim) < 2:
      raise ValueError(f'model.pos_encoding_options.rope.fraction={options.fraction} rotates no feature pair of '
                       f'a head of {head_dim}')

  def rotary(self, positions: base.Array) -> base.Rotary:
    rotated = self.options.rotated_features(self.head_dim)
    return rotation(positions / self.options.interpolation_factor, rotated=rotated,
                    base=self.options.scaled_base(rotated))

  def attention_terms(self, query_positions: base.Array, key_positions: base.Array, *,
                      causal: bool) -> base.AttentionTerms:
    del causal
    return base.AttentionTerms(query_rotary=self.rotary(query_positions), key_rotary=self.rotary(key_positions))
