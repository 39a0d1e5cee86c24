"""Encoder-decoder Transformer for translation (Vaswani et al. 2017; pre- or post-LayerNorm, `model.norm_position`)."""
import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from lra_posenc.models.transformer import Decoder, Encoder, TransformerConfig

Array = jax.Array
# How token embeddings are parametrised; the two compute the same function at initialisation.
# 'none': table entries ~ N(0, 1), looked up as they are, tied output logits y.E^T / sqrt(d) (Flax's WMT
# example). 'sqrt_dim': entries ~ N(0, 1/d), lookups times sqrt(d), tied logits y.E^T (Vaswani et al. 2017,
# section 3.4; fairseq). Adam steps every entry by about the learning rate, so the second table moves
# sqrt(d) times faster relative to its size.
EMBEDDING_SCALINGS = ('none', 'sqrt_dim')


@jax.custom_vjp
def tied_logits(y: Array, embedding: Array) -> Array:
  """y [..., d] times the embedding table [V, d] transposed: logits [..., V].

  The same product as jnp.dot(y, embedding.T), differentiated so that the table's gradient is
  (y^T g)^T: XLA:CPU otherwise forms g^T g-sized, transposing the [tokens, V] logit gradient
  (33M floats at 4096 tokens and V 8000) to multiply it, where this transposes y and the
  [d, V] product, V / d and tokens / d times smaller.
  """
  return jnp.dot(y, embedding.T)


def _tied_logits_forward(y: Array, embedding: Array) -> tuple[Array, tuple[Array, Array]]:
  return tied_logits(y, embedding), (y, embedding)


def _tied_logits_backward(residuals: tuple[Array, Array], gradient: Array) -> tuple[Array, Array]:
  y, embedding = residuals
  gradient = gradient.astype(y.dtype)
  flat_y, flat_gradient = y.reshape(-1, y.shape[-1]), gradient.reshape(-1, gradient.shape[-1])
  return jnp.dot(gradient, embedding), jnp.dot(flat_y.T, flat_gradient).T.astype(embedding.dtype)


tied_logits.defvjp(_tied_logits_forward, _tied_logits_backward)


def shift_right(targets: Array, bos_id: int) -> Array:
  """Decoder inputs: `bos_id`, then the targets without their last position."""
  return jnp.concatenate([jnp.full_like(targets[:, :1], bos_id), targets[:, :-1]], axis=1)


class Seq2SeqTransformer(nn.Module):
  """Maps source ids [batch, source_length] and target ids to next-token logits.

  With `share_embeddings` one table embeds source and target tokens and, transposed,
  gives the output logits; that needs one joint vocabulary. `embedding_scaling` (one of
  EMBEDDING_SCALINGS) says how the tables are parametrised. Token id `pad_id` marks padding.
  """
  config: TransformerConfig
  source_vocab_size: int
  target_vocab_size: int
  share_embeddings: bool
  bos_id: int
  pad_id: int = 0
  decode: bool = False
  embedding_scaling: str = 'none'

  def setup(self):
    cfg = self.config
    if self.share_embeddings and self.source_vocab_size != self.target_vocab_size:
      raise ValueError('shared embeddings need one joint vocabulary; got source and target vocabularies of '
                       f'{self.source_vocab_size} and {self.target_vocab_size} tokens')
    self.lookup_scale = cfg.emb_dim ** 0.5 if self.embedding_scaling == 'sqrt_dim' else 1.0
    embed = lambda size, name: nn.Embed(size, cfg.emb_dim, embedding_init=nn.initializers.normal(1 / self.lookup_scale),
                                        name=name)
    self.source_embed = embed(self.source_vocab_size, 'source_embed')
    self.target_embed = self.source_embed if self.share_embeddings else embed(self.target_vocab_size, 'target_embed')
    self.encoder = Encoder(cfg)
    self.decoder = Decoder(cfg, decode=self.decode)
    if not self.share_embeddings:
      self.output_projection = nn.Dense(self.target_vocab_size, dtype=cfg.dtype)

  def attention_calls(self, source_length: int, target_length: int) -> dict[str, tuple[int, int, bool, bool]]:
    """The attention calls of a teacher-forced pass: (query length, key length, takes the encoding's terms,
    keys padded). The decoder's own keys are causal, not padded."""
    return {'encoder self-attention': (source_length, source_length, True, True),
            'decoder self-attention': (target_length, target_length, True, False),
            'cross-attention': (target_length, source_length, False, True)}

  def encode(self, inputs: Array, *, train: bool) -> Array:
    return self.encoder(self.source_embed(inputs) * self.lookup_scale, valid=inputs != self.pad_id,
                        deterministic=not train)

  def decode_logits(self, decoder_inputs: Array, encoded: Array, encoder_valid: Array, *, train: bool) -> Array:
    """Logits [batch, length, target_vocab] for teacher-forced (or, with `decode`, one-step) inputs."""
    y = self.decoder(self.target_embed(decoder_inputs) * self.lookup_scale, encoded, encoder_valid=encoder_valid,
                     deterministic=not train)
    if self.share_embeddings:  # In the model's dtype, like every other matrix product; lookups stay float32.
      # Entries of unit variance ('none'): y divided by sqrt(d), as a table of variance 1/d would give, on
      # y rather than on the V times larger logits and their gradient.
      y = y if self.embedding_scaling == 'sqrt_dim' else y / jnp.sqrt(y.shape[-1]).astype(y.dtype)
      dtype = self.config.dtype
      return tied_logits(y.astype(dtype), self.target_embed.embedding.astype(dtype))
    return self.output_projection(y)

  def __call__(self, inputs: Array, targets: Array, *, train: bool) -> Array:
    chex.assert_rank([inputs, targets], 2)  # [batch, length] each: a single sentence needs its batch axis.
    chex.assert_type([inputs, targets], int)
    chex.assert_equal_shape_prefix([inputs, targets], 1)
    encoded = self.encode(inputs, train=train)
    return self.decode_logits(shift_right(targets, self.bos_id), encoded, inputs != self.pad_id, train=train)
