"""Sequence classifier: token embeddings, Transformer encoder, pooling, MLP head (as in LRA)."""
import dataclasses

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from lra_posenc import encodings
from lra_posenc.models.transformer import (DERIVED, Encoder, TransformerConfig, create_encoding, padded_length,
                                           randomized_positions)

POOLINGS = ('cls', 'mean')
# 'after_encoder' adds an additive encoding to the encoder's output instead of its input: the
# Chebyshev-PE study's placement, kept to test its claim. Under 'cls' pooling the classifier then
# sees only row 0 of the table, a constant.
PLACEMENTS = ('input', 'after_encoder')


class TransformerClassifier(nn.Module):
  """Classifies token sequences [batch, length]; token id `pad_id` marks padding.

  With 'cls' pooling a learned vector is prepended at position 0, so the encoder sees
  length + 1 positions; `TransformerConfig.max_len` must count it. `pos_encoding_placement`
  is one of PLACEMENTS.

  With `randomized_positions` = L > 0 (Ruoss et al. 2023) the encoder's positions are not 0 ... T-1
  but T distinct draws from [0, L), sorted (the CLS token takes the first): one draw per call (per
  batch and device), from the 'positions' RNG stream in training. The paper draws at test time
  too; evaluation here uses one fixed draw, so that scores are reproducible. `config.max_len`
  must cover L.

  With `length_multiple` = M > 1 the encoder's attention runs over its input (the CLS token
  included) padded at the end to a multiple of M (2001 positions to 2048 with M = 128), masked
  as keys, so that cuDNN's fused attention, which trains with a bias or key padding only at
  even lengths, can serve it. The parameters are the unpadded model's, and so are its outputs
  and gradients up to rounding (tests/test_padding.py), except that dropout inside the encoder
  draws other masks, of the same rate, over the padded shape.

  The unmarked fields are `config.model` keys of the same name (`transformer.config_keys`); the task derives
  the others.
  """
  config: TransformerConfig = dataclasses.field(metadata=DERIVED)
  vocab_size: int = dataclasses.field(metadata=DERIVED)
  num_classes: int = dataclasses.field(metadata=DERIVED)
  pooling: str
  classifier_dim: int
  pos_encoding_placement: str = 'input'
  pad_id: int = dataclasses.field(default=0, metadata=DERIVED)
  randomized_positions: int = 0
  length_multiple: int = 1

  def attention_calls(self, length: int) -> dict[str, tuple[int, int, bool, bool]]:
    """The attention calls of a pass over `length` tokens: (query length, key length, takes the encoding's
    terms, keys padded)."""
    positions = padded_length(length + (self.pooling == 'cls'), self.length_multiple)
    return {'encoder self-attention': (positions, positions, True, True)}

  @nn.compact
  def __call__(self, tokens: jax.Array, *, train: bool) -> jax.Array:
    chex.assert_rank(tokens, 2)  # [batch, length]: a single sequence needs its batch axis.
    chex.assert_type(tokens, int)
    cfg = self.config
    valid = tokens != self.pad_id
    x = nn.Embed(self.vocab_size, cfg.emb_dim, embedding_init=nn.initializers.normal(1.0), name='embed')(tokens)
    if self.pooling == 'cls':
      cls = self.param('cls', nn.initializers.normal(0.02), (1, 1, cfg.emb_dim))
      x = jnp.concatenate([jnp.broadcast_to(cls, (x.shape[0], 1, cfg.emb_dim)), x], axis=1)
      valid = jnp.concatenate([jnp.ones_like(valid[:, :1]), valid], axis=1)
    positions = jnp.arange(x.shape[1], dtype=jnp.int32)[None]
    if self.randomized_positions:
      key = self.make_rng('positions') if train else jax.random.key(0)
      positions = randomized_positions(key, x.shape[1], self.randomized_positions)
    after_encoder = self.pos_encoding_placement == 'after_encoder'
    x = Encoder(cfg, add_to_inputs=not after_encoder, length_multiple=self.length_multiple, name='encoder')(
        x, valid=valid, positions=positions, deterministic=not train)
    if after_encoder:
      x = create_encoding(cfg).add_to_inputs(x, positions)
    if self.pooling == 'cls':
      pooled = x[:, 0]
    else:
      weights = valid[..., None].astype(x.dtype)
      pooled = (x * weights).sum(1) / jnp.maximum(weights.sum(1), 1.0)
    hidden = nn.relu(nn.Dense(self.classifier_dim, name='pre_logits')(pooled))
    return nn.Dense(self.num_classes, name='logits')(hidden)
