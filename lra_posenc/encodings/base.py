"""The contract every positional encoding fulfils.

An encoding acts in up to two places: on the token embeddings (`add_to_inputs`) and
inside attention (`attention_terms`: a logit bias, rotary angles for queries and keys,
and/or a content term: logits computed from the queries and keys themselves). The
model asks both questions of every encoding, so adding an encoding never adds a
branch to the model.

Positions are int32 arrays of shape [batch or 1, length]; a leading 1 broadcasts
over the batch and keeps attention biases small.
"""
import dataclasses
from collections.abc import Callable
from typing import ClassVar, TypeVar

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
Encoding = TypeVar('Encoding', bound=type)
# `model.pos_encoding` name -> encoding class; encodings/__init__.py imports every module, so each registers.
REGISTRY: dict[str, type['PositionalEncoding']] = {}


def register(name: str) -> Callable[[Encoding], Encoding]:
  """Class decorator: the encoding `model.pos_encoding=name` selects."""
  def add(cls: Encoding) -> Encoding:
    if name in REGISTRY:
      raise ValueError(f'two encodings are registered as {name!r}: {REGISTRY[name].__qualname__} and '
                       f'{cls.__qualname__}')
    REGISTRY[name] = cls
    return cls
  return add


@flax.struct.dataclass
class Rotary:
  """Rotary angles for one side of attention, each of shape [batch|1, length, 1, rotated // 2].

  The first `rotated` features of each head turn (all of them, or a fraction: partial
  rotary), the rest pass unchanged; with `scale` (of the same shape) each turned pair is
  also multiplied by it (xPos). A pytree, like `AttentionTerms`, so both cross
  rematerialised (`nn.remat`) block boundaries.
  """
  sin: Array
  cos: Array
  scale: Array | None = None

  def apply(self, x: Array) -> Array:
    """Rotates feature pairs (i, i + rotated/2), i < rotated/2, of `x` [batch, length, heads, head_dim]."""
    rotated = 2 * self.sin.shape[-1]
    x1, x2 = jnp.split(x[..., :rotated], 2, axis=-1)
    sin, cos = self.sin.astype(x.dtype), self.cos.astype(x.dtype)
    if self.scale is not None:
      sin, cos = sin * self.scale.astype(x.dtype), cos * self.scale.astype(x.dtype)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., rotated:]], axis=-1)


class ContentTerm:
  """Attention logits that read the queries and keys (Transformer-XL, CoPE).

  An encoding's term is a `flax.struct.dataclass` subclass: its array fields (parameters, positions) cross
  block boundaries as the other terms do, its static fields (`pytree_node=False`) fix the computation.
  `logits(query, key, mask)` [batch, heads, q_length, k_length] reads the projected (and rotated) query and
  key [batch, length, heads, head_dim] and the boolean mask [batch|1, 1, q_length, k_length] of keys each
  query may attend to. The result is added to the scaled q.k logits as is: the term does its own scaling.
  """

  def logits(self, query: Array, key: Array, mask: Array | None) -> Array:
    raise NotImplementedError


@flax.struct.dataclass
class AttentionTerms:
  """What an encoding contributes to one attention call."""
  bias: Array | None = None  # [batch|1, heads, q_length, k_length], added to the logits.
  query_rotary: Rotary | None = None
  key_rotary: Rotary | None = None
  content: ContentTerm | None = None

  def logit_bias(self, query: Array, key: Array, mask: Array | None) -> Array | None:
    """Everything added to the scaled q.k logits: the bias plus the content term's logits, if any."""
    if self.content is None:
      return self.bias
    content = self.content.logits(query, key, mask)
    return content if self.bias is None else content + self.bias


@dataclasses.dataclass(frozen=True)
class NoOptions:
  """Encodings without options."""


class PositionalEncoding(nn.Module):
  """No positional information: the base every encoding refines.

  Attributes:
    max_len: the largest number of positions the model is configured for.
    dim: model (embedding) width.
    num_heads: attention heads, for per-head biases.
    head_dim: width of one attention head, for rotary encodings.
    options: the encoding's options, a frozen dataclass; its default's type is `Options`.
  """
  max_len: int
  dim: int
  num_heads: int
  head_dim: int
  options: NoOptions = NoOptions()

  Options: ClassVar[type] = NoOptions

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    cls.Options = type(cls.__dataclass_fields__['options'].default)  # Declared once: by the field.

  @classmethod
  def check_model(cls, options: object, *, max_len: int, head_dim: int) -> None:
    """Raises ValueError, naming the config key, for a model shape this encoding cannot serve."""
    del options, max_len, head_dim

  def add_to_inputs(self, x: Array, positions: Array) -> Array:
    del positions
    return x

  def attention_terms(self, query_positions: Array, key_positions: Array, *, causal: bool) -> AttentionTerms:
    del query_positions, key_positions, causal
    return AttentionTerms()


register('none')(PositionalEncoding)


class TableEncoding(PositionalEncoding):
  """An additive encoding read from a fixed [positions, dim] table."""

  def table(self, num_positions: int) -> np.ndarray:
    """The float32 table with at least `num_positions` rows."""
    raise NotImplementedError

  def add_to_inputs(self, x: Array, positions: Array) -> Array:
    table = self.table(max(self.max_len, x.shape[1]))
    return x + lookup(table, positions).astype(x.dtype)


def absolute_distance(query_positions: Array, key_positions: Array) -> Array:
  """|i - j| for every query i and key j, as float32 [batch|1, 1, q_length, k_length]: one head axis to
  broadcast per-head parameters over."""
  return jnp.abs(query_positions[:, None, :, None] - key_positions[:, None, None, :]).astype(jnp.float32)


def lookup(table: Array | np.ndarray, positions: Array) -> Array:
  """Rows of `table` at `positions`; positions outside the table read NaN, never a clamped row."""
  return jnp.take(jnp.asarray(table), positions, axis=0, mode='fill', fill_value=jnp.nan)


class CannotExtrapolate(ValueError):
  """An input reaches positions an encoding has no rows for (its table or normalisation stops at max_len)."""


def check_capacity(name: str, needed: int, max_len: int) -> None:
  """Rejects, at trace time, sequences longer than an encoding that cannot extrapolate."""
  if needed > max_len:
    raise CannotExtrapolate(
        f'{name} positional encoding covers {max_len} positions but the input has {needed}; '
        f'{name} cannot extrapolate beyond max_len')
