"""Pre-LayerNorm Transformer encoder with a pluggable positional encoding."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra_posenc import encodings
from lra_posenc.models.attention import MultiHeadAttention

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Hyper-parameters of the Transformer stack, as read from `config.model`."""
  emb_dim: int
  num_heads: int
  num_layers: int
  qkv_dim: int
  mlp_dim: int
  dropout_rate: float
  attention_dropout_rate: float
  pos_encoding: str
  pos_encoding_options: object
  max_len: int

  @property
  def head_dim(self) -> int:
    return self.qkv_dim // self.num_heads


class MlpBlock(nn.Module):
  mlp_dim: int
  dropout_rate: float

  @nn.compact
  def __call__(self, x: Array, *, deterministic: bool) -> Array:
    y = nn.gelu(nn.Dense(self.mlp_dim)(x))
    y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    return nn.Dense(x.shape[-1])(y)


class EncoderBlock(nn.Module):
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array, *, mask: Array, terms: encodings.AttentionTerms, deterministic: bool) -> Array:
    cfg = self.config
    dropout = nn.Dropout(cfg.dropout_rate)
    y = nn.LayerNorm()(x)
    y = MultiHeadAttention(cfg.num_heads, cfg.qkv_dim, cfg.attention_dropout_rate)(
        y, y, mask=mask, terms=terms, deterministic=deterministic)
    x = x + dropout(y, deterministic=deterministic)
    y = MlpBlock(cfg.mlp_dim, cfg.dropout_rate)(nn.LayerNorm()(x), deterministic=deterministic)
    return x + dropout(y, deterministic=deterministic)


class Encoder(nn.Module):
  """Encodes embedded inputs [batch, length, emb_dim]; `valid` marks real (non-padding) positions."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array, *, valid: Array, positions: Array | None = None, deterministic: bool) -> Array:
    cfg = self.config
    if positions is None:
      positions = jnp.arange(x.shape[1], dtype=jnp.int32)[None]
    encoding = encodings.create(cfg.pos_encoding, cfg.pos_encoding_options, max_len=cfg.max_len,
                                dim=cfg.emb_dim, num_heads=cfg.num_heads, head_dim=cfg.head_dim)
    x = encoding.add_to_inputs(x, positions)
    x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
    terms = encoding.attention_terms(positions, positions, causal=False)
    mask = valid[:, None, None, :]
    for i in range(cfg.num_layers):
      x = EncoderBlock(cfg, name=f'block_{i}')(x, mask=mask, terms=terms, deterministic=deterministic)
    return nn.LayerNorm(name='final_norm')(x)
