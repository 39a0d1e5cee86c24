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


def output_logits(states: Array, table: Array, bias: Array | None) -> Array:
  """The output layer: float32 logits [..., V] = states [..., d] . table [V, d]^T (+ bias [V])."""
  logits = jnp.dot(states, table.T, preferred_element_type=jnp.float32)
  return logits if bias is None else logits + bias


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

  def setup(self) -> None:
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
    if not self.share_embeddings:  # As nn.Dense's kernel (LeCun normal) and bias, the table transposed.
      self.output_table = self.param('output_table', nn.initializers.lecun_normal(in_axis=-1, out_axis=-2),
                                     (self.target_vocab_size, cfg.emb_dim))
      self.output_bias = self.param('output_bias', nn.initializers.zeros_init(), (self.target_vocab_size,))

  def attention_calls(self, source_length: int, target_length: int) -> dict[str, tuple[int, int, bool, bool]]:
    """The attention calls of a teacher-forced pass: (query length, key length, takes the encoding's terms,
    keys padded). The decoder's own keys are causal, not padded."""
    return {'encoder self-attention': (source_length, source_length, True, True),
            'decoder self-attention': (target_length, target_length, True, False),
            'cross-attention': (target_length, source_length, False, True)}

  def encode(self, inputs: Array, *, train: bool) -> Array:
    return self.encoder(self.source_embed(inputs) * self.lookup_scale, valid=inputs != self.pad_id,
                        deterministic=not train)

  def output_layer(self) -> tuple[Array, Array | None]:
    """The output layer's table [V, d] in the model's dtype and bias [V] (None when tied to the embedding)."""
    if self.share_embeddings:
      return self.target_embed.embedding.astype(self.config.dtype), None
    return self.output_table.astype(self.config.dtype), self.output_bias

  def decoder_states(self, decoder_inputs: Array, encoded: Array, encoder_valid: Array, *, train: bool) -> Array:
    """The decoder's last states, as the output layer takes them (`output_logits`)."""
    y = self.decoder(self.target_embed(decoder_inputs) * self.lookup_scale, encoded, encoder_valid=encoder_valid,
                     deterministic=not train)
    if self.share_embeddings and self.embedding_scaling == 'none':
      # Entries of unit variance: y divided by sqrt(d), as a table of variance 1/d would give, on y rather
      # than on the V times larger logits and their gradient.
      y = y / jnp.sqrt(y.shape[-1]).astype(y.dtype)
    return y.astype(self.config.dtype)  # In the model's dtype, like every other matrix product.

  def decode_logits(self, decoder_inputs: Array, encoded: Array, encoder_valid: Array, *, train: bool) -> Array:
    """Logits [batch, length, target_vocab] for teacher-forced (or, with `decode`, one-step) inputs."""
    return output_logits(self.decoder_states(decoder_inputs, encoded, encoder_valid, train=train),
                         *self.output_layer())

  def output_layer_inputs(self, inputs: Array, targets: Array, *, train: bool) -> tuple[Array, Array, Array | None]:
    """The teacher-forced pass up to the output layer: the decoder's last states [batch, length, d] and
    the layer's table and bias, for a loss that forms the logits itself (translation/loss.py)."""
    chex.assert_rank([inputs, targets], 2)  # [batch, length] each: a single sentence needs its batch axis.
    chex.assert_type([inputs, targets], int)
    chex.assert_equal_shape_prefix([inputs, targets], 1)
    encoded = self.encode(inputs, train=train)
    states = self.decoder_states(shift_right(targets, self.bos_id), encoded, inputs != self.pad_id, train=train)
    return states, *self.output_layer()

  def __call__(self, inputs: Array, targets: Array, *, train: bool) -> Array:
    """Teacher-forced logits [batch, length, target_vocab]."""
    return output_logits(*self.output_layer_inputs(inputs, targets, train=train))
