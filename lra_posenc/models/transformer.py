"""Transformer encoder and decoder (pre- or post-LayerNorm) with a pluggable positional encoding."""
import dataclasses
import functools
import types
from collections.abc import Callable
from typing import TypeVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from lra_posenc import encodings
from lra_posenc.models import attention
from lra_posenc.models.attention import MultiHeadAttention
from lra_posenc.models.dense import dense_dot_general
from lra_posenc.models.dropout import Dropout
from lra_posenc.validation import check_positive, check_range, check_section_choice

Array = jax.Array
ModelT = TypeVar('ModelT', bound=nn.Module)


# Whose `config.model` key a field of TransformerConfig or of a task's model is (its metadata under KEY_OF):
# 'every' task's (unmarked fields), an 'optional' one only some tasks' models have, or 'none': the task derives it.
KEY_OF = 'config_key'
DERIVED = types.MappingProxyType({KEY_OF: 'none'})  # The metadata of a field that is no `config.model` key.


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Hyper-parameters of the Transformer stack, as read from `config.model`: each field is that section's key
  of the same name (`use_bias` and `init_std` only where a task's model has them), but for `max_len`, the
  positions the task needs; `transformer_config` converts `dtype` and `pos_encoding_options`."""
  emb_dim: int
  num_heads: int
  num_layers: int
  qkv_dim: int
  mlp_dim: int
  dropout_rate: float
  attention_dropout_rate: float
  pos_encoding: str
  pos_encoding_options: object
  max_len: int = dataclasses.field(metadata=DERIVED)
  dtype: jnp.dtype = jnp.dtype(jnp.float32)
  attention_implementation: str = 'auto'
  remat: bool = False
  norm_position: str = 'pre'
  activation: str = 'gelu'
  activation_dropout_rate: float = 0.0
  # Not `config.model` keys of every task: a task whose model reads them sets them (the language model's
  # GPT-2 form). Biases in every projection and layer norm; 0: Flax's initialisers (LeCun normal kernels), > 0:
  # every kernel N(0, init_std) and the projections into the residual stream N(0, init_std / sqrt(2 layers))
  # (GPT-2, section 2.3; nanoGPT).
  use_bias: bool = dataclasses.field(default=True, metadata={KEY_OF: 'optional'})
  init_std: float = dataclasses.field(default=0.0, metadata={KEY_OF: 'optional'})
  # A key of any task's `config.model`, present only where set: the file an encoding outside the package comes
  # from ('': the package's own), which `transformer_config` loads before reading the encoding; a config (a run's
  # config.json) names it where it selects such an encoding (`config_files.config_argument`).
  pos_encoding_module: str = dataclasses.field(default='', metadata={KEY_OF: 'if_set'})

  @property
  def head_dim(self) -> int:
    return self.qkv_dim // self.num_heads

  def kernel_init(self, *, into_residual: bool = False) -> nn.initializers.Initializer:
    """The initialiser of a projection's kernel; `into_residual` for one whose output is added to the residual
    stream (attention's output, the MLP's second layer)."""
    if not self.init_std:
      return nn.linear.default_kernel_init
    return nn.initializers.normal(self.init_std / (2 * self.num_layers) ** 0.5 if into_residual else self.init_std)


def config_keys(fields_of: type, whose: str = 'every') -> tuple[str, ...]:
  """The `config.model` keys among the fields of `fields_of` (a dataclass, a Flax module among them) that are
  `whose` ('every', 'optional', 'if_set'), in field order; Flax's own fields (parent, name) are none."""
  kinds = {f.name: f.metadata.get(KEY_OF, 'every') for f in dataclasses.fields(fields_of)
           if f.name not in ('parent', 'name') or not issubclass(fields_of, nn.Module)}
  for name, kind in kinds.items():
    if kind not in ('every', 'optional', 'if_set', 'none'):
      raise ValueError(f"{fields_of.__name__}.{name}: {KEY_OF} {kind!r} is not 'every', 'optional', 'if_set' or "
                       "'none'")
  return tuple(name for name, kind in kinds.items() if kind == whose)


# The Transformer stack's keys in every task's `config.model`, those a task's model may add, and those any config
# may carry where set (`check_keys`' optional keys): the fields.
CONFIG_KEYS, OPTIONAL_CONFIG_KEYS = config_keys(TransformerConfig), config_keys(TransformerConfig, 'optional')
IF_SET_CONFIG_KEYS = config_keys(TransformerConfig, 'if_set')
# Where each block's layer norms sit: 'pre', before each sublayer with one more after the stack (stable
# without warmup; Xiong et al. 2020), or 'post', after each residual sum (Vaswani et al. 2017; fairseq's
# default, the Multi30k literature's).
NORM_POSITIONS = ('pre', 'post')
ACTIVATIONS = {'gelu': nn.gelu, 'relu': nn.relu}  # Of the MLP's hidden layer.
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
  check_section_choice(model, 'model', 'attention_implementation', attention.IMPLEMENTATIONS)
  check_section_choice(model, 'model', 'norm_position', NORM_POSITIONS)
  check_section_choice(model, 'model', 'activation', ACTIVATIONS)
  if not isinstance(model.remat, bool):
    raise ValueError(f'model.remat must be True or False, got {model.remat!r}')
  for key in ('dropout_rate', 'attention_dropout_rate', 'activation_dropout_rate'):
    check_range(f'model.{key}', model[key], at_least=0, below=1)
  if model.qkv_dim % model.num_heads:
    raise ValueError(f'model.qkv_dim={model.qkv_dim} is not divisible by model.num_heads={model.num_heads}')
  if model.get('pos_encoding_module'):
    encodings.load_module(model.pos_encoding_module)
  options = encodings.resolve_options(model.pos_encoding, model.pos_encoding_options)
  encodings.REGISTRY[model.pos_encoding].check_model(options, max_len=max_len,
                                                     head_dim=model.qkv_dim // model.num_heads)
  keys = CONFIG_KEYS + tuple(key for key in OPTIONAL_CONFIG_KEYS + IF_SET_CONFIG_KEYS if key in model)
  cfg = TransformerConfig(**{key: model[key] for key in keys} | {
      'pos_encoding_options': options, 'dtype': jnp.dtype(DTYPES[model.dtype]), 'max_len': max_len})
  if cfg.attention_implementation == 'cudnn':  # What holds for every call; lengths are checked per call.
    has_content = encoding_terms_shape(cfg).content is not None
    attention.choose_path('cudnn', _attention_call(cfg, 2, 2, has_bias=has_content, has_content=has_content),
                          jax.local_devices()[0])
  return cfg


def with_xla_attention(model: ModelT) -> ModelT:
  """`model` (a module whose `config` is a TransformerConfig) with every attention call on XLA's path.

  XLA runs on any backend and materialises the weights, so a model trained on cuDNN can be read on a
  CPU and have its attention weights drawn, and a trace shows the two products over query-key pairs
  that a cuDNN call hides (and computes all the same).
  """
  return model.clone(config=dataclasses.replace(model.config, attention_implementation='xla'))


def _attention_call(cfg: TransformerConfig, query_length: int, key_length: int, *, has_bias: bool,
                    has_content: bool = False, padded: bool = False) -> attention.AttentionCall:
  return attention.AttentionCall(dtype=cfg.dtype, head_dim=cfg.head_dim, query_length=query_length,
                                 key_length=key_length, has_bias=has_bias, dropout_rate=cfg.attention_dropout_rate,
                                 training=True, has_content=has_content, padded=padded)


def attention_paths(cfg: TransformerConfig, calls: dict[str, tuple[int, int, bool, bool]],
                    device: object = None) -> dict[str, attention.AttentionPath]:
  """The path each of a model's training attention calls takes, for the run's log and results.

  `calls` maps a call's name to (query length, key length, whether it takes the encoding's
  terms, whether its keys are padded); the encoding itself says whether its terms include a
  bias. The model's attention layers decide through the same `attention.choose_path` when they
  are traced.
  """
  device = device or jax.local_devices()[0]
  terms = encoding_terms_shape(cfg)
  has_content = terms.content is not None
  has_bias = terms.bias is not None or has_content
  return {name: attention.choose_path(cfg.attention_implementation,
                                      _attention_call(cfg, q_length, k_length, has_bias=takes_terms and has_bias,
                                                      has_content=takes_terms and has_content, padded=padded),
                                      device)
          for name, (q_length, k_length, takes_terms, padded) in calls.items()}


def encoding_terms_shape(cfg: TransformerConfig) -> encodings.AttentionTerms:
  """The shapes of `cfg`'s encoding's attention terms (`encodings.terms_shape`)."""
  return encodings.terms_shape(create_encoding(cfg))


def padded_length(length: int, multiple: int) -> int:
  """`length` rounded up to a multiple of `multiple`."""
  return -(-length // multiple) * multiple


def randomized_positions(key: jax.Array, length: int, max_position: int) -> jax.Array:
  """`length` distinct positions from [0, max_position), drawn uniformly without replacement and sorted:
  int32 [1, length], shared by the batch."""
  if length > max_position:  # Beyond the positions training drew from: as an encoding's table ending.
    raise encodings.CannotExtrapolate(f'model.randomized_positions={max_position} cannot place an input of '
                                      f'{length} positions: it must be at least the longest input (with the CLS '
                                      'token, if any)')
  return jnp.sort(jax.random.choice(key, max_position, (length,), replace=False)).astype(jnp.int32)[None]


def create_encoding(cfg: TransformerConfig) -> encodings.PositionalEncoding:
  """The positional encoding module of the model `cfg` describes."""
  return encodings.create(cfg.pos_encoding, cfg.pos_encoding_options, max_len=cfg.max_len, dim=cfg.emb_dim,
                          num_heads=cfg.num_heads, head_dim=cfg.head_dim)


class MlpBlock(nn.Module):
  """Dense, activation, dropout at `dropout_rate` (fairseq's activation dropout), Dense."""
  mlp_dim: int
  dropout_rate: float
  dtype: jnp.dtype = jnp.float32
  activation: str = 'gelu'
  use_bias: bool = True
  kernel_init: nn.initializers.Initializer = nn.linear.default_kernel_init
  out_kernel_init: nn.initializers.Initializer = nn.linear.default_kernel_init

  @nn.compact
  def __call__(self, x: Array, *, deterministic: bool) -> Array:
    dense = lambda features, init: nn.Dense(features, dtype=self.dtype, use_bias=self.use_bias, kernel_init=init,
                                            dot_general=dense_dot_general)
    y = ACTIVATIONS[self.activation](dense(self.mlp_dim, self.kernel_init)(x))
    y = Dropout(self.dropout_rate)(y, deterministic=deterministic)
    return dense(x.shape[-1], self.out_kernel_init)(y)


def residual(cfg: TransformerConfig, x: Array, sublayer: Callable[[Array], Array], *, deterministic: bool) -> Array:
  """`x` plus the dropped-out `sublayer` output, layer-normalised where `cfg.norm_position` says: the
  sublayer's input ('pre') or the sum ('post'). Called inside a block, whose layer norms these become."""
  dropout = functools.partial(Dropout(cfg.dropout_rate), deterministic=deterministic)
  if cfg.norm_position == 'pre':
    return x + dropout(sublayer(nn.LayerNorm(use_bias=cfg.use_bias)(x)))
  return nn.LayerNorm(use_bias=cfg.use_bias)(x + dropout(sublayer(x)))


def mlp_block(cfg: TransformerConfig) -> MlpBlock:
  """The MLP sublayer `cfg` describes."""
  return MlpBlock(cfg.mlp_dim, cfg.activation_dropout_rate, cfg.dtype, cfg.activation, cfg.use_bias,
                  cfg.kernel_init(), cfg.kernel_init(into_residual=True))


def attention_layer(cfg: TransformerConfig, name: str | None = None, *, decode: bool = False) -> MultiHeadAttention:
  """An attention sublayer as `cfg` describes it (with a key/value cache under `decode`)."""
  return MultiHeadAttention(cfg.num_heads, cfg.qkv_dim, cfg.attention_dropout_rate, decode=decode, dtype=cfg.dtype,
                            implementation=cfg.attention_implementation, use_bias=cfg.use_bias,
                            kernel_init=cfg.kernel_init(), out_kernel_init=cfg.kernel_init(into_residual=True),
                            name=name)


def final_norm(cfg: TransformerConfig, x: Array) -> Array:
  """The stack's output: layer-normalised after pre-LN blocks (whose residual stream is not), as is."""
  return nn.LayerNorm(use_bias=cfg.use_bias, name='final_norm')(x) if cfg.norm_position == 'pre' else x


def _block(module: type[nn.Module], cfg: TransformerConfig) -> type[nn.Module]:
  """`module`, rematerialised under `cfg.remat`: its activations are recomputed in the backward pass
  instead of stored, so stored activations stop growing with layers x length^2."""
  return nn.remat(module) if cfg.remat else module


class EncoderBlock(nn.Module):
  config: TransformerConfig
  deterministic: bool

  @nn.compact
  def __call__(self, x: Array, key_valid: Array, terms: encodings.AttentionTerms) -> Array:
    cfg, deterministic = self.config, self.deterministic
    self_attention = attention_layer(cfg)
    x = residual(cfg, x, lambda y: self_attention(y, y, key_valid=key_valid, terms=terms,
                                                  deterministic=deterministic), deterministic=deterministic)
    return residual(cfg, x, lambda y: mlp_block(cfg)(y, deterministic=deterministic), deterministic=deterministic)


class Encoder(nn.Module):
  """Encodes embedded inputs [batch, length, emb_dim]; `valid` marks real (non-padding) positions.

  With `add_to_inputs=False` the encoding acts only inside attention, for models that
  add its table elsewhere.

  With `length_multiple` > 1 the blocks see the sequence padded at the end to a multiple of
  it, for attention kernels that need such lengths (cuDNN trains with a bias or key padding
  only at even ones). The padding is masked as keys and takes the last real position, so
  every encoding reads rows it has; the encoding is added before padding, so tables that stop
  at `max_len` (learned, Chebyshev) never see the padded length; the output is cut back to
  the input's length. Without dropout only rounding differs from the unpadded computation;
  dropout inside the blocks draws its masks over the padded shape, so other masks of the same rate.
  """
  config: TransformerConfig
  add_to_inputs: bool = True
  length_multiple: int = 1

  @nn.compact
  def __call__(self, x: Array, *, valid: Array, positions: Array | None = None, deterministic: bool) -> Array:
    cfg = self.config
    length = x.shape[1]
    if positions is None:
      positions = jnp.arange(length, dtype=jnp.int32)[None]
    encoding = create_encoding(cfg)
    if self.add_to_inputs:
      x = encoding.add_to_inputs(x, positions)
    x = Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
    extra = padded_length(length, self.length_multiple) - length
    if extra:
      x = jnp.pad(x, ((0, 0), (0, extra), (0, 0)))
      valid = jnp.pad(valid, ((0, 0), (0, extra)))
      positions = jnp.pad(positions, ((0, 0), (0, extra)), mode='edge')
    terms = encoding.attention_terms(positions, positions, causal=False)
    block = _block(EncoderBlock, cfg)
    for i in range(cfg.num_layers):
      x = block(cfg, deterministic, name=f'block_{i}')(x, valid, terms)
    return final_norm(cfg, x[:, :length])


class DecoderBlock(nn.Module):
  """Causal self-attention, cross-attention to an encoder's output where there is one, MLP."""
  config: TransformerConfig
  deterministic: bool
  decode: bool = False

  @nn.compact
  def __call__(self, x: Array, encoded: Array | None, self_valid: Array | None, encoder_valid: Array | None,
               terms: encodings.AttentionTerms, cache_index: Array | None) -> Array:
    cfg, deterministic = self.config, self.deterministic
    self_attention = attention_layer(cfg, 'self_attention', decode=self.decode)
    x = residual(cfg, x, lambda y: self_attention(
        y, y, key_valid=self_valid, causal=cache_index is None, terms=terms, deterministic=deterministic,
        cache_index=cache_index), deterministic=deterministic)
    if encoded is not None:
      cross_attention = attention_layer(cfg, 'cross_attention')
      x = residual(cfg, x, lambda y: cross_attention(
          y, encoded, key_valid=encoder_valid, terms=encodings.AttentionTerms(), deterministic=deterministic),
          deterministic=deterministic)
    return residual(cfg, x, lambda y: mlp_block(cfg)(y, deterministic=deterministic), deterministic=deterministic)


class Decoder(nn.Module):
  """Causal decoder over embedded inputs [batch, length, emb_dim], attending to `encoded` where
  `encoder_valid` (an encoder-decoder's), or to nothing else (`encoded` None: a decoder-only language model).

  Positional terms act on self-attention only (causal biases and rotations); cross-attention
  has no positional terms. `positions` [1, length] replaces 0 ... length - 1 (randomized positions).
  With `decode=True` a full-length call shapes the cache (`config.max_len` positions), then each call
  takes the next single token; its position is the cache's step counter, so additive tables, rotations
  and biases see the same positions as in a full forward pass.
  """
  config: TransformerConfig
  decode: bool = False

  @nn.compact
  def __call__(self, x: Array, encoded: Array | None = None, *, encoder_valid: Array | None = None,
               positions: Array | None = None, deterministic: bool) -> Array:
    cfg = self.config
    encoding = create_encoding(cfg)
    stepping = self.decode and self.has_variable('cache', 'index')
    step = self.variable('cache', 'index', lambda: jnp.zeros((), jnp.int32)) if self.decode else None
    if stepping:
      positions = step.value[None, None]
      key_positions = jnp.arange(cfg.max_len, dtype=jnp.int32)[None]
      self_valid = key_positions <= step.value
      cache_index = step.value
      step.value = step.value + 1
    else:
      if positions is None:
        positions = jnp.arange(x.shape[1], dtype=jnp.int32)[None]
      key_positions = positions
      self_valid = cache_index = None  # Causal: each position sees itself and those before it.
    x = encoding.add_to_inputs(x, positions)
    x = Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
    terms = encoding.attention_terms(positions, key_positions, causal=True)
    block = _block(DecoderBlock, cfg)
    for i in range(cfg.num_layers):
      x = block(cfg, deterministic, decode=self.decode, name=f'block_{i}')(
          x, encoded, self_valid, encoder_valid, terms, cache_index)
    return final_norm(cfg, x)
