"""Pre-LayerNorm Transformer encoder and decoder with a pluggable positional encoding."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from lra_posenc import encodings
from lra_posenc.models.attention import MultiHeadAttention
from lra_posenc.training.config_checks import check_positive, check_section_choice

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
  dtype: jnp.dtype = jnp.dtype(jnp.float32)

  @property
  def head_dim(self) -> int:
    return self.qkv_dim // self.num_heads


CONFIG_KEYS = ('emb_dim', 'num_heads', 'num_layers', 'qkv_dim', 'mlp_dim', 'dropout_rate', 'attention_dropout_rate',
               'pos_encoding', 'pos_encoding_options', 'dtype')
# Computation dtypes of `model.dtype`. Parameters stay float32 either way; so do the residual
# stream, embeddings, positional tables and biases, layer norms and softmax, so that low
# precision touches only the matrix products (flax's dtype / param_dtype split).
DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}


def transformer_config(model: ml_collections.ConfigDict, *, max_len: int) -> TransformerConfig:
  """The Transformer that `model` (a task's `config.model`) describes for `max_len` positions.

  Raises ValueError naming the key for shapes that cannot work (heads not dividing
  qkv_dim, a shape the encoding cannot serve: its own `check_model` says which) or an
  unknown encoding, option or dtype.
  """
  check_positive(model, 'model', 'emb_dim', 'num_heads', 'num_layers', 'qkv_dim', 'mlp_dim')
  check_section_choice(model, 'model', 'dtype', DTYPES)
  if model.qkv_dim % model.num_heads:
    raise ValueError(f'model.qkv_dim={model.qkv_dim} is not divisible by model.num_heads={model.num_heads}')
  options = encodings.resolve_options(model.pos_encoding, model.pos_encoding_options)
  encodings.REGISTRY[model.pos_encoding].check_model(options, max_len=max_len,
                                                     head_dim=model.qkv_dim // model.num_heads)
  return TransformerConfig(
      emb_dim=model.emb_dim, num_heads=model.num_heads, num_layers=model.num_layers, qkv_dim=model.qkv_dim,
      mlp_dim=model.mlp_dim, dropout_rate=model.dropout_rate, attention_dropout_rate=model.attention_dropout_rate,
      pos_encoding=model.pos_encoding, pos_encoding_options=options, max_len=max_len,
      dtype=jnp.dtype(DTYPES[model.dtype]))


def create_encoding(cfg: TransformerConfig) -> encodings.PositionalEncoding:
  """The positional encoding module of the model `cfg` describes."""
  return encodings.create(cfg.pos_encoding, cfg.pos_encoding_options, max_len=cfg.max_len, dim=cfg.emb_dim,
                          num_heads=cfg.num_heads, head_dim=cfg.head_dim)


class MlpBlock(nn.Module):
  mlp_dim: int
  dropout_rate: float
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array, *, deterministic: bool) -> Array:
    y = nn.gelu(nn.Dense(self.mlp_dim, dtype=self.dtype)(x))
    y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    return nn.Dense(x.shape[-1], dtype=self.dtype)(y)


class EncoderBlock(nn.Module):
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array, *, mask: Array, terms: encodings.AttentionTerms, deterministic: bool) -> Array:
    cfg = self.config
    dropout = nn.Dropout(cfg.dropout_rate)
    y = nn.LayerNorm()(x)
    y = MultiHeadAttention(cfg.num_heads, cfg.qkv_dim, cfg.attention_dropout_rate, dtype=cfg.dtype)(
        y, y, mask=mask, terms=terms, deterministic=deterministic)
    x = x + dropout(y, deterministic=deterministic)
    y = MlpBlock(cfg.mlp_dim, cfg.dropout_rate, cfg.dtype)(nn.LayerNorm()(x), deterministic=deterministic)
    return x + dropout(y, deterministic=deterministic)


class Encoder(nn.Module):
  """Encodes embedded inputs [batch, length, emb_dim]; `valid` marks real (non-padding) positions.

  With `add_to_inputs=False` the encoding acts only inside attention, for models that
  add its table elsewhere.
  """
  config: TransformerConfig
  add_to_inputs: bool = True

  @nn.compact
  def __call__(self, x: Array, *, valid: Array, positions: Array | None = None, deterministic: bool) -> Array:
    cfg = self.config
    if positions is None:
      positions = jnp.arange(x.shape[1], dtype=jnp.int32)[None]
    encoding = create_encoding(cfg)
    if self.add_to_inputs:
      x = encoding.add_to_inputs(x, positions)
    x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
    terms = encoding.attention_terms(positions, positions, causal=False)
    mask = valid[:, None, None, :]
    for i in range(cfg.num_layers):
      x = EncoderBlock(cfg, name=f'block_{i}')(x, mask=mask, terms=terms, deterministic=deterministic)
    return nn.LayerNorm(name='final_norm')(x)


class DecoderBlock(nn.Module):
  config: TransformerConfig
  decode: bool = False

  @nn.compact
  def __call__(self, x: Array, encoded: Array, *, self_mask: Array, cross_mask: Array,
               terms: encodings.AttentionTerms, deterministic: bool, cache_index: Array | None) -> Array:
    cfg = self.config
    dropout = nn.Dropout(cfg.dropout_rate)
    y = nn.LayerNorm()(x)
    y = MultiHeadAttention(cfg.num_heads, cfg.qkv_dim, cfg.attention_dropout_rate, decode=self.decode,
                           dtype=cfg.dtype, name='self_attention')(
        y, y, mask=self_mask, terms=terms, deterministic=deterministic, cache_index=cache_index)
    x = x + dropout(y, deterministic=deterministic)
    y = MultiHeadAttention(cfg.num_heads, cfg.qkv_dim, cfg.attention_dropout_rate, dtype=cfg.dtype,
                           name='cross_attention')(
        nn.LayerNorm()(x), encoded, mask=cross_mask, terms=encodings.AttentionTerms(),
        deterministic=deterministic)
    x = x + dropout(y, deterministic=deterministic)
    y = MlpBlock(cfg.mlp_dim, cfg.dropout_rate, cfg.dtype)(nn.LayerNorm()(x), deterministic=deterministic)
    return x + dropout(y, deterministic=deterministic)


class Decoder(nn.Module):
  """Causal decoder over embedded target inputs, attending to `encoded` where `encoder_valid`.

  Positional terms act on self-attention only (causal biases and rotations); cross-attention
  has no positional terms. With `decode=True` a full-length call shapes the cache
  (`config.max_len` positions), then each call takes the next single token; its position
  is the cache's step counter, so additive tables, rotations and biases see the same
  positions as in a full forward pass.
  """
  config: TransformerConfig
  decode: bool = False

  @nn.compact
  def __call__(self, x: Array, encoded: Array, *, encoder_valid: Array, deterministic: bool) -> Array:
    cfg = self.config
    encoding = create_encoding(cfg)
    stepping = self.decode and self.has_variable('cache', 'index')
    step = self.variable('cache', 'index', lambda: jnp.zeros((), jnp.int32)) if self.decode else None
    if stepping:
      positions = step.value[None, None]
      key_positions = jnp.arange(cfg.max_len, dtype=jnp.int32)[None]
      self_mask = (key_positions <= step.value)[:, None, None, :]
      cache_index = step.value
      step.value = step.value + 1
    else:
      positions = key_positions = jnp.arange(x.shape[1], dtype=jnp.int32)[None]
      self_mask = nn.make_causal_mask(positions, dtype=jnp.bool_)
      cache_index = None
    x = encoding.add_to_inputs(x, positions)
    x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
    terms = encoding.attention_terms(positions, key_positions, causal=True)
    cross_mask = encoder_valid[:, None, None, :]
    for i in range(cfg.num_layers):
      x = DecoderBlock(cfg, decode=self.decode, name=f'block_{i}')(
          x, encoded, self_mask=self_mask, cross_mask=cross_mask, terms=terms, deterministic=deterministic,
          cache_index=cache_index)
    return nn.LayerNorm(name='final_norm')(x)
