"""The positional-encoding registry: one name, one class.

Adding an encoding is one file in this folder: a subclass of `base.PositionalEncoding` (with an
`options` field holding a frozen dataclass if it has options) under `@base.register('name')`.
Every module here is imported, so it registers itself; the registry lists 'none', then the rest by name.
Trying one needs no fork: such a file anywhere is loaded by `load_module`, which a config names as
`--config=CONFIG_FILE:VARIANT,encoding_module=PATH` (`config_files.config_argument`).
"""
import dataclasses
import functools
import importlib
import importlib.util
import os
import pkgutil
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import ml_collections

from lra_posenc.encodings.base import (REGISTRY, AttentionTerms, CannotExtrapolate, ContentTerm, PositionalEncoding,
                                       Rotary)

for _module in pkgutil.iter_modules(__path__):  # Each module registers its encodings.
  importlib.import_module(f'{__name__}.{_module.name}')
for _name in sorted(REGISTRY, key=lambda name: (name != 'none', name)):  # 'none', then by name, however imported.
  REGISTRY[_name] = REGISTRY.pop(_name)

OPTIONS_KEY = 'model.pos_encoding_options'
_LOADED: dict[str, str] = {}  # An encoding module's real path -> the encoding it registered.

__all__ = [
    'REGISTRY', 'AttentionTerms', 'CannotExtrapolate', 'ContentTerm', 'PositionalEncoding', 'Rotary',
    'options_config', 'resolve_options', 'upgrade_config', 'create', 'terms_shape', 'default_terms',
    'acts_in_attention', 'load_module',
]


def load_module(path: str) -> str:
  """Registers the one encoding that the Python file at `path`, outside this package, defines under
  `@base.register(NAME)`, and returns NAME; the same file again returns it again. Raises ValueError, naming the
  file, where it does not exist or fails to run, registers no encoding or more than one, or takes a name already
  registered; the registry is then as it was."""
  real = os.path.realpath(path)
  if real in _LOADED:
    return _LOADED[real]
  if not os.path.isfile(real):
    raise ValueError(f'encoding module {path}: no such file')
  before, problem = set(REGISTRY), None
  spec = importlib.util.spec_from_file_location(f'lra_posenc_encoding_module_{len(_LOADED)}', real)
  try:
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
  except Exception as error:  # A user's file: one line naming it, whatever it raised.
    problem = f'{type(error).__name__}: {error}'
  added = [name for name in REGISTRY if name not in before]
  if problem is None and len(added) != 1:
    problem = (f"registers {len(added)} encodings{' (' + ', '.join(added) + ')' if added else ''}; an encoding "
               'module registers exactly one, with @lra_posenc.encodings.base.register(NAME)')
  if problem:
    for name in added:
      del REGISTRY[name]
    raise ValueError(f'encoding module {path}: {problem}')
  _LOADED[real] = added[0]
  return added[0]


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


def upgrade_config(model: dict) -> dict:
  """A config.json's model section (a dict, changed in place and returned) as today's code reads it: an option of an
  encoding it did not select, recorded at a default since changed (the Options' FORMER_DEFAULTS), which had no
  effect, reads as today's default; the selected encoding's options stay as they were trained."""
  for name, cls in REGISTRY.items():
    section = model.get('pos_encoding_options', {}).get(name)
    if name == model.get('pos_encoding') or section is None:
      continue
    for key, former in getattr(cls.Options, 'FORMER_DEFAULTS', {}).items():
      if section.get(key) == former:
        section[key] = getattr(cls.Options(), key)
  return model


def create(encoding: str, options: object, *, max_len: int, dim: int, num_heads: int,
           head_dim: int) -> PositionalEncoding:
  """The module for `encoding` (already validated by `resolve_options`)."""
  return REGISTRY[encoding](max_len=max_len, dim=dim, num_heads=num_heads, head_dim=head_dim, options=options,
                            name='pos_encoding')


def terms_shape(encoding: PositionalEncoding) -> AttentionTerms:
  """The shapes of `encoding`'s attention terms: which of bias, rotations and content term it gives, found by
  tracing it, not by its name."""
  positions = jnp.zeros((1, 2), jnp.int32)
  terms, _ = jax.eval_shape(lambda: encoding.init_with_output(
      jax.random.key(0), positions, positions, causal=False, method=encoding.attention_terms))
  return terms


@functools.cache
def default_terms(encoding: str) -> AttentionTerms:
  """`terms_shape` of `encoding` with its default options, in a small model: what kind of encoding it is."""
  return terms_shape(create(encoding, REGISTRY[encoding].Options(), max_len=8, dim=8, num_heads=2, head_dim=4))


def acts_in_attention(encoding: str) -> bool:
  """Whether `encoding` contributes attention terms (rotations, biases, a content term), not only an additive
  input."""
  terms = default_terms(encoding)
  return any(getattr(terms, field.name) is not None for field in dataclasses.fields(terms))
