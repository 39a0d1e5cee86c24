"""DAPE (Zheng et al., NeurIPS 2024): a bias encoding's logits refined by an MLP that reads them with the content.

A = q.k / sqrt(d) + B + f([q.k / sqrt(d); B]): B is the wrapped encoding's bias [heads, q, k] (`bias`: alibi,
kerple_log or fire, at its default options), and f an MLP over the head axis, applied at every query-key pair,
from the 2 x heads channels of the scaled logits and the bias to `mlp_width` with LeakyReLU (slope 0.01) and back
to the heads (the paper's DAPE-1, with its code's width 32). So the position term adapts to the content, while B
keeps its extrapolating shape. The MLP's layers have Flax's default initialisation (the paper's code PyTorch's).
"""
import dataclasses

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra_posenc.encodings import base
from lra_posenc.validation import check_choice, check_range

WRAPPED = ('alibi', 'kerple_log', 'fire')  # The bias encodings DAPE's paper refines.


@dataclasses.dataclass(frozen=True)
class DapeOptions:
  bias: str = 'kerple_log'
  mlp_width: int = 32

  def __post_init__(self):
    check_choice('bias', self.bias, WRAPPED)
    check_range('mlp_width', self.mlp_width, at_least=1)


@flax.struct.dataclass
class DapeTerm(base.ContentTerm):
  """The wrapped bias [batch|1, heads, q, k] and the MLP's kernels [2 heads, width], [width, heads] and biases."""
  bias: base.Array
  hidden_kernel: base.Array
  hidden_bias: base.Array
  output_kernel: base.Array
  output_bias: base.Array

  def logits(self, query: base.Array, key: base.Array, mask: base.Array | None) -> base.Array:
    """f([q.k / sqrt(d); B]) [batch, heads, q_length, k_length]; B itself is the terms' bias."""
    del mask  # f reads each pair alone: a masked pair's value is masked after.
    scores = jnp.einsum('bqhd,bkhd->bqkh', query.astype(jnp.float32), key.astype(jnp.float32))
    scores = scores / np.sqrt(query.shape[-1])
    bias = jnp.broadcast_to(self.bias.transpose(0, 2, 3, 1), scores.shape)
    hidden = jax.nn.leaky_relu(jnp.concatenate([scores, bias], axis=-1) @ self.hidden_kernel + self.hidden_bias)
    return (hidden @ self.output_kernel + self.output_bias).transpose(0, 3, 1, 2)


@base.register('dape')
class DapeEncoding(base.PositionalEncoding):
  options: DapeOptions = DapeOptions()

  @nn.compact
  def attention_terms(self, query_positions: base.Array, key_positions: base.Array, *,
                      causal: bool) -> base.AttentionTerms:
    wrapped = base.REGISTRY[self.options.bias]
    inner = wrapped(max_len=self.max_len, dim=self.dim, num_heads=self.num_heads, head_dim=self.head_dim,
                    options=wrapped.Options(), name=self.options.bias)
    bias = inner.attention_terms(query_positions, key_positions, causal=causal).bias
    init = nn.initializers.lecun_normal()
    width, heads = self.options.mlp_width, self.num_heads
    return base.AttentionTerms(bias=bias, content=DapeTerm(
        bias=bias,
        hidden_kernel=self.param('hidden_kernel', init, (2 * heads, width)),
        hidden_bias=self.param('hidden_bias', nn.initializers.zeros, (width,)),
        output_kernel=self.param('output_kernel', init, (width, heads)),
        output_bias=self.param('output_bias', nn.initializers.zeros, (heads,))))
