"""Chebyshev encoding (Chebyshev-PE paper): table[p, i] = T_i(x_p), order = dimension index.

Positions are normalised by max_len onto [-1, 1]: x_p = 2 (p + offset) / (max_len - 1) - 1.
Beyond max_len, x_p > 1 and T_i grows like cosh(i arccosh x): the encoding cannot
extrapolate, so longer inputs are rejected.

Options left open by the paper, with their defaults:
  max_len: normalisation length; 0 means the model's max_len.
  position_offset: added to every position before normalising (0).
  scale: multiplies the table (1.0).
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lra_posenc.encodings import base, host
from lra_posenc.validation import check_range


@dataclasses.dataclass(frozen=True)
class ChebyshevOptions:
  max_len: int = 0
  position_offset: int = 0
  scale: float = 1.0

  def __post_init__(self):
    if self.max_len != 0:
      check_range('max_len', self.max_len, at_least=2, why="or 0: the model's max_len")
    check_range('position_offset', self.position_offset, at_least=0)
    check_range('scale', self.scale, above=0)


@functools.partial(jax.jit, static_argnames='dim')
def _chebyshev_rows(x: jax.Array, dim: int) -> jax.Array:
  """T_0..T_{dim-1} at every x by T_{n+1} = 2x T_n - T_{n-1}; returns [len(x), dim]."""

  def step(carry, _):
    t_n, t_next = carry
    return (t_next, 2 * x * t_next - t_n), t_n

  _, orders = lax.scan(step, (jnp.ones_like(x), x), None, length=dim)
  return orders.T


@functools.lru_cache(maxsize=32)
def chebyshev_table(length: int, dim: int, max_len: int, *, position_offset: int = 0) -> np.ndarray:
  """float32 [length, dim] with table[p, i] = T_i(2 (p + position_offset) / (max_len - 1) - 1)."""
  if max_len < 2:
    raise ValueError(f'chebyshev max_len must be at least 2, got {max_len}')
  last = length - 1 + position_offset
  if last > max_len - 1:
    raise base.CannotExtrapolate(
        f'chebyshev positions reach {last} but max_len={max_len} normalises only 0..{max_len - 1}; '
        'chebyshev cannot extrapolate beyond max_len')
  x = 2.0 * (np.arange(length, dtype=np.float64) + position_offset) / (max_len - 1) - 1.0
  return host.evaluate_on_host(_chebyshev_rows, x, dim=dim)


@base.register('chebyshev')
class ChebyshevEncoding(base.TableEncoding):
  options: ChebyshevOptions = ChebyshevOptions()

  @classmethod
  def check_model(cls, options: ChebyshevOptions, *, max_len: int, head_dim: int) -> None:
    del head_dim
    needed = max_len + options.position_offset  # The table's rows reach position max_len - 1 + position_offset.
    if 0 < options.max_len < needed:
      raise ValueError(f'model.pos_encoding_options.chebyshev.max_len={options.max_len} is shorter than the '
                       f'{needed} positions the data and position_offset need')
    if not options.max_len and options.position_offset:
      raise ValueError(f'model.pos_encoding_options.chebyshev.position_offset={options.position_offset} needs '
                       f'chebyshev.max_len >= {needed}: with max_len 0 the table is normalised over the model\'s '
                       f'{max_len} positions, which the offset passes')

  def table(self, num_positions: int) -> np.ndarray:
    table = chebyshev_table(num_positions, self.dim, self.options.max_len or self.max_len,
                            position_offset=self.options.position_offset)
    return table * np.float32(self.options.scale)
