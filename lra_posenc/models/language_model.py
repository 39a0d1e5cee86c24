"""Decoder-only causal Transformer language model in GPT-2's form (Radford et al. 2019; nanoGPT).

Token embeddings, the positional encoding (added to the inputs or acting in attention, as the encoding
says), pre-LayerNorm causal blocks without cross-attention, a final LayerNorm, and output logits from
the token embedding table transposed (tied). Biases and the initialisation follow `TransformerConfig`
(`use_bias`, `init_std`). The embedding table is parametrised as `embedding_scaling` says (one of
`seq2seq.EMBEDDING_SCALINGS`): 'none', entries N(0, `init_std`) looked up as they are (GPT-2, nanoGPT);
'sqrt_dim', entries N(0, 1/d) and lookups times sqrt(d), so the inputs have unit scale as a fixed
sinusoidal table's entries do (Vaswani et al. 2017, section 3.4; fairseq's language models, which ALiBi's
paper compares). Either way the output logits are the final states times the table, transposed.
"""
import dataclasses

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from lra_posenc.models.seq2seq import output_logits
from lra_posenc.models.transformer import DERIVED, Decoder, TransformerConfig, randomized_positions

Array = jax.Array


class LanguageModel(nn.Module):
  """Next-token logits [batch, length, vocab] (float32) for token ids [batch, length].

  With `randomized_positions` = L > 0 (Ruoss et al. 2023) training reads positions drawn from [0, L)
  without replacement and sorted, one draw per call from the 'positions' RNG stream, shared by the batch; so
  does evaluation given a 'positions' stream (their protocol: `lm.scoring`), and without one evaluation and
  generation read 0 ... length - 1, so an input of up to L tokens sits at positions training has seen.
  `config.max_len` must cover L. With `decode=True` the model keeps a key/value cache
  (`MultiHeadAttention`): a first call with [batch, max_len] ids shapes it, each later call takes one
  token per row. The unmarked fields are `config.model` keys of the same name (`transformer.config_keys`); the
  task derives the others.
  """
  config: TransformerConfig = dataclasses.field(metadata=DERIVED)
  vocab_size: int = dataclasses.field(metadata=DERIVED)
  randomized_positions: int = 0
  decode: bool = dataclasses.field(default=False, metadata=DERIVED)
  embedding_scaling: str = 'none'

  def attention_calls(self, length: int) -> dict[str, tuple[int, int, bool, bool]]:
    """The attention calls of a pass over `length` tokens: (query length, key length, takes the encoding's
    terms, keys padded): causal, never padded."""
    return {'decoder self-attention': (length, length, True, False)}

  @nn.compact
  def __call__(self, tokens: Array, *, train: bool) -> Array:
    chex.assert_rank(tokens, 2)  # [batch, length]: a single sequence needs its batch axis.
    chex.assert_type(tokens, int)
    cfg = self.config
    lookup_scale = cfg.emb_dim ** 0.5 if self.embedding_scaling == 'sqrt_dim' else 1.0
    entry_std = 1 / lookup_scale if self.embedding_scaling == 'sqrt_dim' else cfg.init_std or 1.0
    embed = nn.Embed(self.vocab_size, cfg.emb_dim, embedding_init=nn.initializers.normal(entry_std), name='embed')
    positions = None
    if self.randomized_positions and (train or self.has_rng('positions')):
      positions = randomized_positions(self.make_rng('positions'), tokens.shape[1], self.randomized_positions)
    inputs = embed(tokens) * lookup_scale
    states = Decoder(cfg, decode=self.decode, name='decoder')(inputs, positions=positions, deterministic=not train)
    return output_logits(states.astype(cfg.dtype), embed.embedding.astype(cfg.dtype), None)


def next_token_sums(logits: Array, targets: Array, weight: Array) -> dict[str, Array]:
  """Sums over the weighted target tokens: negative log-likelihood (nats), its bits, and correct top-1
  predictions; 'count' is the summed weight. `logits` [batch, length, vocab], `targets` and `weight`
  [batch, length]."""
  nll = weighted_nll(logits, targets, weight).sum()
  correct = ((jnp.argmax(logits, -1) == targets) * weight).sum()
  return {'loss': nll, 'log_likelihood': -nll, 'bits_per_token': nll / jnp.log(2.0), 'accuracy': correct,
          'count': weight.sum()}


def weighted_nll(logits: Array, targets: Array, weight: Array) -> Array:
  """Each target token's negative log-likelihood (nats) times its weight [batch, length]; exactly 0 where the weight
  is 0 (padding), whatever the model gives there."""
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
  nll = -jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
  return jnp.where(weight > 0, nll * weight, 0.0)
