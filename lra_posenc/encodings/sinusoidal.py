"""Sinusoidal encoding (Vaswani et al. 2017), interleaved sin/cos as in LRA."""
import dataclasses
import functools

import numpy as np

from lra_posenc.encodings import base
from lra_posenc.validation import check_range


@dataclasses.dataclass(frozen=True)
class SinusoidalOptions:
  base: float = 10000.0

  def __post_init__(self):
    check_range('base', self.base, above=1, why='wavelengths grow from 2 pi to 2 pi base')


@functools.lru_cache(maxsize=32)
def sinusoidal_table(length: int, dim: int, *, base: float = 10000.0) -> np.ndarray:
  """table[p, 2k] = sin(p / base^(2k/dim)), table[p, 2k+1] = cos(same), float32 [length, dim].

  Angles are formed in float64: in float32 the angle of position 4095 is already off
  by 2e-4 radians.
  """
  positions = np.arange(length, dtype=np.float64)[:, None]
  inverse_timescales = np.exp(np.arange(0, dim, 2, dtype=np.float64) * -(np.log(base) / dim))
  angles = positions * inverse_timescales
  table = np.zeros((length, dim), np.float64)
  table[:, 0::2] = np.sin(angles)
  table[:, 1::2] = np.cos(angles[:, :dim // 2])
  table = table.astype(np.float32)
  table.flags.writeable = False
  return table


@base.register('sinusoidal')
class SinusoidalEncoding(base.TableEncoding):
  options: SinusoidalOptions = SinusoidalOptions()

  def table(self, num_positions: int) -> np.ndarray:
    return sinusoidal_table(num_positions, self.dim, base=self.options.base)
