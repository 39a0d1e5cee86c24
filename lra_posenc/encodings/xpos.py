"""xPos (Sun et al. 2023, "A Length-Extrapolatable Transformer"): rotary with an exponential decay.

Pair i of d/2 turns as in RoPE and is scaled by zeta_i^(n / gamma) on a query at position n
and by zeta_i^(-m / gamma) on a key at m, zeta_i = (i / (d/2) + gamma_0) / (1 + gamma_0), so
the score of n and m carries zeta_i^((n - m) / gamma): an attention to keys farther back
decays, fastest in the fastest-turning pair (zeta_0 = gamma_0 / (1 + gamma_0)). Positions
are measured from the middle of the model's `max_len` (a shift both sides share, which leaves
n - m alone) so the scales stay within float32 range for inputs several times `max_len`, as
the paper's code centres them.
In a bidirectional encoder n - m is negative for keys after the query: their scores grow by
zeta_i^(-(m - n) / gamma), exponentially in the distance, the mirror image of the decay
(about 130-fold for m - n = 2000 at the defaults, in the fastest-turning pair).
The paper is causal; this is what its formula does without the causal mask.
"""
import dataclasses

import jax.numpy as jnp

from lra_posenc.encodings import base, rope
from lra_posenc.validation import check_range


@dataclasses.dataclass(frozen=True)
class XposOptions:
  base: float = 10000.0
  gamma: float = 512.0  # The paper's scale base.
  gamma_0: float = 0.4

  def __post_init__(self):
    check_range('base', self.base, above=1, why='wavelengths grow from 2 pi to 2 pi base')
    check_range('gamma', self.gamma, above=0)
    check_range('gamma_0', self.gamma_0, above=0)


@base.register('xpos')
class XposEncoding(base.PositionalEncoding):
  options: XposOptions = XposOptions()

  @classmethod
  def check_model(cls, options: XposOptions, *, max_len: int, head_dim: int) -> None:
    del options, max_len
    rope.check_even_head_dim('xpos', head_dim)

  def rotary(self, positions: base.Array, sign: float) -> base.Rotary:
    """RoPE's rotation with `base`, scaled by zeta^(sign * (position - centre) / gamma)."""
    turned = rope.rotation(positions, rotated=self.head_dim, base=self.options.base)
    pairs = jnp.arange(0, self.head_dim, 2, dtype=jnp.float32)
    zeta = (pairs + self.options.gamma_0 * self.head_dim) / ((1 + self.options.gamma_0) * self.head_dim)
    centred = (positions - self.max_len // 2).astype(jnp.float32)[..., None, None]
    return turned.replace(scale=zeta ** (sign * centred / self.options.gamma))

  def attention_terms(self, query_positions: base.Array, key_positions: base.Array, *,
                      causal: bool) -> base.AttentionTerms:
    del causal
    return base.AttentionTerms(query_rotary=self.rotary(query_positions, 1.0),
                               key_rotary=self.rotary(key_positions, -1.0))
