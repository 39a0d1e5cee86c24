"""Legendre encoding (PoPE): table[p, i] = P_{p + offset}(x_i), order = position.

The d sample points are equidistant in [-1, 1]. The paper does not pin the grid down:
  grid='closed' (default): x_i = -1 + 2i / (d - 1), both endpoints included.
  grid='open':             x_i = -1 + 2i / d, the right endpoint excluded.
Other options: position_offset added to the order (0), scale multiplying the table (1.0).
Any position is representable, so the encoding extrapolates to unseen lengths.
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lra_posenc.encodings import base, host
from lra_posenc.validation import check_choice, check_range

GRIDS = ('closed', 'open')


@dataclasses.dataclass(frozen=True)
class LegendreOptions:
  grid: str = 'closed'
  position_offset: int = 0
  scale: float = 1.0

  def __post_init__(self):
    check_choice('grid', self.grid, GRIDS)
    check_range('position_offset', self.position_offset, at_least=0, why='a polynomial order')
    check_range('scale', self.scale, above=0)


def legendre_grid(dim: int, grid: str = 'closed') -> np.ndarray:
  """The float64 sample points x_0..x_{dim-1}."""
  check_choice('grid', grid, GRIDS)
  if grid == 'closed':
    if dim < 2:
      raise ValueError(f"legendre grid='closed' needs dim >= 2, got {dim}")
    return -1.0 + 2.0 * np.arange(dim, dtype=np.float64) / (dim - 1)
  return -1.0 + 2.0 * np.arange(dim, dtype=np.float64) / dim


@functools.partial(jax.jit, static_argnames='num_orders')
def _legendre_rows(x: jax.Array, num_orders: int) -> jax.Array:
  """P_0..P_{num_orders-1} at every x by (n+1) P_{n+1} = (2n+1) x P_n - n P_{n-1}; [num_orders, len(x)]."""

  def step(carry, n):
    p_n, p_next = carry
    p_after = ((2 * n + 3) * x * p_next - (n + 1) * p_n) / (n + 2)
    return (p_next, p_after), p_n

  orders = jnp.arange(num_orders, dtype=x.dtype)
  _, rows = lax.scan(step, (jnp.ones_like(x), x), orders)
  return rows


@functools.lru_cache(maxsize=32)
def legendre_table(length: int, dim: int, *, grid: str = 'closed', position_offset: int = 0) -> np.ndarray:
  """float32 [length, dim] with table[p, i] = P_{p + position_offset}(x_i)."""
  rows = host.evaluate_on_host(_legendre_rows, legendre_grid(dim, grid), num_orders=length + position_offset)
  return rows[position_offset:]


@base.register('legendre')
class LegendreEncoding(base.TableEncoding):
  options: LegendreOptions = LegendreOptions()

  def table(self, num_positions: int) -> np.ndarray:
    table = legendre_table(num_positions, self.dim, grid=self.options.grid,
                           position_offset=self.options.position_offset)
    return table * np.float32(self.options.scale)
