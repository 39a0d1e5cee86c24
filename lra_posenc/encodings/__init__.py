"""The positional-encoding registry: one name, one module.

Adding an encoding: write a module subclassing `base.PositionalEncoding` (with an
`Options` dataclass if it has options) and add one line to `REGISTRY`.
"""
import dataclasses
from collections.abc import Mapping

import ml_collections

from lra_posenc.encodings import (alibi, base, chebyshev, cope, dynamic_bias, fire, kerple, learned, legendre, rope,
                                  sinusoidal, t5, transformer_xl, xpos)
from lra_posenc.encodings.alibi import alibi_slopes
from lra_posenc.encodings.base import AttentionTerms, CannotExtrapolate, ContentTerm, PositionalEncoding, Rotary
from lra_posenc.encodings.chebyshev import chebyshev_table
from lra_posenc.encodings.legendre import legendre_table
from lra_posenc.encodings.sinusoidal import sinusoidal_table

REGISTRY: dict[str, type[PositionalEncoding]] = {
    'none': base.PositionalEncoding,
    'sinusoidal': sinusoidal.SinusoidalEncoding,
    'learned': learned.LearnedEncoding,
    'rope': rope.RopeEncoding,
    'alibi': alibi.AlibiEncoding,
    't5': t5.T5Encoding,
    'chebyshev': chebyshev.ChebyshevEncoding,
    'legendre': legendre.LegendreEncoding,
    'kerple_log': kerple.KerpleLogEncoding,
    'kerple_power': kerple.KerplePowerEncoding,
    'fire': fire.FireEncoding,
    'dynamic_bias': dynamic_bias.DynamicBiasEncoding,
    'xpos': xpos.XposEncoding,
    'transformer_xl': transformer_xl.TransformerXlEncoding,
    'cope': cope.CopeEncoding,
}

OPTIONS_KEY = 'model.pos_encoding_options'

__all__ = [
    'REGISTRY', 'AttentionTerms', 'CannotExtrapolate', 'ContentTerm', 'PositionalEncoding', 'Rotary', 'alibi_slopes', 'chebyshev_table',
    'legendre_table', 'sinusoidal_table', 'options_config', 'resolve_options', 'create', 'acts_in_attention',
]


def options_config() -> ml_collections.ConfigDict:
  """Every encoding's options at their defaults, one section per encoding that has any."""
  return ml_collections.ConfigDict({
      name: dataclasses.asdict(cls.Options())
      for name, cls in REGISTRY.items() if dataclasses.fields(cls.Options)
  })


def resolve_options(name: str, all_options: Mapping[str, Mapping]) -> object:
  """Validates the encoding name and its options; returns the selected encoding's Options.

  Options set away from their defaults for an encoding that is not selected are an
  error: they would have no effect, which is almost always a typo in a sweep.
  """
  if name not in REGISTRY:
    raise ValueError(f'model.pos_encoding={name!r} is not a known encoding; valid choices: {list(REGISTRY)}')
  unknown = set(all_options) - {n for n, cls in REGISTRY.items() if dataclasses.fields(cls.Options)}
  if unknown:
    raise ValueError(f'{OPTIONS_KEY} has unknown section(s) {sorted(unknown)}')
  selected = None
  for section, values in all_options.items():
    options_cls = REGISTRY[section].Options
    valid_keys = [f.name for f in dataclasses.fields(options_cls)]
    for key in values:
      if key not in valid_keys:
        raise ValueError(f'{OPTIONS_KEY}.{section}.{key} is not an option; valid options: {valid_keys}')
    try:
      options = options_cls(**dict(values))
    except ValueError as error:  # Options name the field first: 'base=-1.0 must be > 1 ...'.
      raise ValueError(f'{OPTIONS_KEY}.{section}.{error}') from None
    if section == name:
      selected = options
    elif options != options_cls():
      changed = [k for k in valid_keys if getattr(options, k) != getattr(options_cls(), k)]
      raise ValueError(
          f'{OPTIONS_KEY}.{section}.{changed[0]} is set but model.pos_encoding={name!r}; it would have no effect')
  return selected if selected is not None else REGISTRY[name].Options()


def acts_in_attention(encoding: str) -> bool:
  """Whether `encoding` contributes attention terms (rotations, biases), not only an additive input."""
  return REGISTRY[encoding].attention_terms is not base.PositionalEncoding.attention_terms


def create(encoding: str, options: object, *, max_len: int, dim: int, num_heads: int,
           head_dim: int) -> PositionalEncoding:
  """The module for `encoding` (already validated by `resolve_options`)."""
  return REGISTRY[encoding](max_len=max_len, dim=dim, num_heads=num_heads, head_dim=head_dim, options=options,
                            name='pos_encoding')
