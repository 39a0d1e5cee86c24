"""FIRE (Li et al., ICLR 2024): a learned function of progressively normalised relative position.

b(i, j) = f(psi(i - j) / psi(max(L, i))), with psi(x) = log(c x + 1) and f an MLP 1 -> width ->
heads with ReLU; c (initialised at 0.1) and the threshold L are learned, L as a multiplier of its
initial value, as in the paper's code. L starts at `init_threshold`, by default 0: a quarter of the
model's max_len, the longest input it trains on (the paper's 512 against inputs of 2048), so that
the normalisation acts inside a training input and is trained. A fixed 512 against windows of 64
never acts in training, and scoring longer inputs then reads an MLP at normalised distances (up to 1)
that training never reached (at most 0.5). The bias is a function of i - j
alone while i <= L; past L the query's own position normalises the distance, so longer
inputs map into the range of values seen in training. The numerator is psi(|i - j|): the
paper's i - j where a causal decoder attends (j <= i), and in the bidirectional encoder a
bias symmetric in i - j, as in the public implementations (they take |c (i - j)|). The
normaliser is psi of max(L, i), the paper's: one public FIRE takes min(L, i), which stops
normalising exactly where it should start.
"""
import dataclasses
from typing import ClassVar

import flax.linen as nn
import jax.numpy as jnp

from lra_posenc.encodings import base
from lra_posenc.validation import check_range


# The threshold's initial value as a fraction of the training length: the paper's 512 for inputs of 2048.
THRESHOLD_FRACTION = 0.25


@dataclasses.dataclass(frozen=True)
class FireOptions:
  mlp_width: int = 32
  init_c: float = 0.1
  init_threshold: float = 0.0  # 0: THRESHOLD_FRACTION of the model's max_len.

  # Defaults before 2026-12-06, which config.json files of other encodings' runs record (`encodings.upgrade_config`).
  FORMER_DEFAULTS: ClassVar[dict] = {'init_threshold': 512.0}

  def __post_init__(self):
    check_range('mlp_width', self.mlp_width, at_least=1)
    check_range('init_c', self.init_c, above=0)
    if self.init_threshold != 0:
      check_range('init_threshold', self.init_threshold, above=0, why="or 0: a quarter of the model's max_len")

  def resolved_threshold(self, max_len: int) -> float:
    """`init_threshold`, or with 0 THRESHOLD_FRACTION of the model's `max_len`."""
    return self.init_threshold or THRESHOLD_FRACTION * max_len


def psi(x: base.Array, c: base.Array) -> base.Array:
  """FIRE's log transform of a non-negative position or distance."""
  return jnp.log(jnp.abs(c) * x + 1.0)


@base.register('fire')
class FireEncoding(base.PositionalEncoding):
  options: FireOptions = FireOptions()

  @nn.compact
  def attention_terms(self, query_positions: base.Array, key_positions: base.Array, *,
                      causal: bool) -> base.AttentionTerms:
    del causal
    c = self.param('c', nn.initializers.constant(self.options.init_c), ())
    threshold = self.options.resolved_threshold(self.max_len) * jnp.abs(self.param('threshold_multiplier', nn.initializers.ones, ()))
    query = query_positions.astype(jnp.float32)[:, :, None]
    distance = jnp.abs(query - key_positions.astype(jnp.float32)[:, None, :])
    # The normaliser is positive (psi of at least L > 0); 1e-6 guards a c learned to 0.
    normalized = psi(distance, c) / (psi(jnp.maximum(threshold, query), c) + 1e-6)
    hidden = nn.relu(nn.Dense(self.options.mlp_width, name='hidden')(normalized[..., None]))
    return base.AttentionTerms(bias=nn.Dense(self.num_heads, name='output')(hidden).transpose(0, 3, 1, 2))
