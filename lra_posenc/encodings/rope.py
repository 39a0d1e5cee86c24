"""Rotary position embedding (Su et al. 2021) on the queries and keys of every head.

Options for longer inputs than trained on: `fraction` rotates only the first fraction of
each head's features (rounded down to an even count; GPT-NeoX's rotary_pct), leaving the
rest position-free; `interpolation_factor` divides positions by the factor (Chen et al.
2023, position interpolation), so L x factor positions take the angles L did; `ntk_factor`
raises the base to base * factor^(r / (r - 2)), r the rotated features (the "NTK-aware"
scaling): the fastest-turning pair keeps its wavelength and the slowest stretches by the factor.

`yarn_factor` s > 1 is YaRN (Peng et al., ICLR 2024, section 3.2-3.3): each pair's frequency theta_d
becomes (1 - gamma) theta_d / s + gamma theta_d, gamma = clip((r_d - alpha) / (beta - alpha), 0, 1) of
r_d = L / lambda_d, the turns its wavelength lambda_d = 2 pi / theta_d makes in the training length L
(the model's max_len), alpha = `yarn_alpha` (1) and beta = `yarn_beta` (32): pairs turning more than beta
times in L keep their frequency, fewer than alpha times are interpolated by s, and a ramp linear in r_d
between; queries and keys are both scaled by 0.1 ln s + 1, so the logits by its square, the paper's
1 / t. (The paper's code ramps linearly in the pair's index between the rounded pairs where r_d = beta
and alpha; this is the paper's formula.) It stretches with no other factor.

`kept_frequencies` p < 1 is p-RoPE (Barbero et al., ICLR 2025): the frequencies stay base^(-2k/r), but only
the highest floor(p (r / 2)) of them turn; the lowest ones are set to 0, so those pairs carry no position. It
differs from `fraction` (GPT-NeoX's partial rotary), which spreads all its frequencies from 1 to 1/base
over fewer features.
"""
import math
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
  yarn_factor: float = 1.0
  yarn_alpha: float = 1.0
  yarn_beta: float = 32.0
  kept_frequencies: float = 1.0

  def __post_init__(self):
    check_range('base', self.base, above=1, why='wavelengths grow from 2 pi to 2 pi base')
    check_range('fraction', self.fraction, above=0, at_most=1)
    check_range('interpolation_factor', self.interpolation_factor, at_least=1)
    check_range('ntk_factor', self.ntk_factor, at_least=1)
    check_range('yarn_factor', self.yarn_factor, at_least=1)
    check_range('yarn_alpha', self.yarn_alpha, above=0)
    check_range('yarn_beta', self.yarn_beta, above=self.yarn_alpha, why='the ramp rises from yarn_alpha to it')
    check_range('kept_frequencies', self.kept_frequencies, above=0, at_most=1)
    if self.yarn_factor > 1 and (self.interpolation_factor > 1 or self.ntk_factor > 1):
      raise ValueError(f'yarn_factor={self.yarn_factor} stretches the positions by itself; interpolation_factor '
                       f'and ntk_factor must stay 1 beside it (got {self.interpolation_factor} and '
                       f'{self.ntk_factor})')

  def rotated_features(self, head_dim: int) -> int:
    """How many of a head's features turn: `fraction` of them, rounded down to whole pairs."""
    return int(self.fraction * head_dim) // 2 * 2

  def kept_pairs(self, rotated: int) -> int:
    """How many of the `rotated` features' pairs turn (p-RoPE): the `kept_frequencies` fraction, rounded down."""
    return int(self.kept_frequencies * (rotated // 2))

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
  return rotation_at(positions, base ** -(jnp.arange(0, rotated, 2, dtype=jnp.float32) / rotated))


def rotation_at(positions: jax.Array, frequencies: jax.Array) -> Rotary:
  """The turn of pair k by position x frequencies[k]."""
  angles = positions.astype(jnp.float32)[..., None, None] * frequencies
  return Rotary(sin=jnp.sin(angles), cos=jnp.cos(angles))


def yarn_frequencies(frequencies: jax.Array, *, factor: float, training_length: int, alpha: float,
                     beta: float) -> jax.Array:
  """YaRN's frequencies: each theta interpolated by `factor` as far as it turns fewer than `beta` times in
  `training_length`, fully below `alpha` turns, on a ramp linear in the turns between."""
  turns = training_length * frequencies / (2 * math.pi)
  ramp = jnp.clip((turns - alpha) / (beta - alpha), 0.0, 1.0)
  return (1 - ramp) * frequencies / factor + ramp * frequencies


def yarn_scale(factor: float) -> float:
  """What YaRN multiplies queries and keys by, sqrt(1 / t) = 0.1 ln s + 1."""
  return 0.1 * math.log(factor) + 1.0


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
    if options.kept_pairs(options.rotated_features(head_dim)) < 1:
      raise ValueError(f'model.pos_encoding_options.rope.kept_frequencies={options.kept_frequencies} keeps no '
                       f'frequency of the {options.rotated_features(head_dim) // 2} pairs a head of {head_dim} turns')

  def rotary(self, positions: base.Array) -> base.Rotary:
    options = self.options
    rotated = options.rotated_features(self.head_dim)
    frequencies = options.scaled_base(rotated) ** -(jnp.arange(0, rotated, 2, dtype=jnp.float32) / rotated)
    kept = options.kept_pairs(rotated)  # p-RoPE: the highest frequencies turn, the rest not.
    frequencies = jnp.where(jnp.arange(rotated // 2) < kept, frequencies, 0.0)
    if options.yarn_factor > 1:
      frequencies = yarn_frequencies(frequencies, factor=options.yarn_factor, training_length=self.max_len,
                                     alpha=options.yarn_alpha, beta=options.yarn_beta)
    turn = rotation_at(positions / options.interpolation_factor, frequencies)
    if options.yarn_factor > 1:
      turn = turn.replace(scale=jnp.full_like(turn.sin, yarn_scale(options.yarn_factor)))
    return turn

  def attention_terms(self, query_positions: base.Array, key_positions: base.Array, *,
                      causal: bool) -> base.AttentionTerms:
    del causal
    return base.AttentionTerms(query_rotary=self.rotary(query_positions), key_rotary=self.rotary(key_positions))
