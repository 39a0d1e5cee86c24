"""Matrix-product FLOPs of the models, for model FLOPs utilisation (MFU).

The analytic counts follow the usual MFU convention: 2 FLOPs per multiply-add of every
matrix product the model computes (attention over all query-key pairs, causal or not),
nothing for element-wise work, and a training step at 3x the forward pass. Positional
encodings add no matrix products, so one count serves all of them. `traced_matmul_flops`
counts the same thing from a traced function; the tests hold the two to equality.
"""
import math
from collections.abc import Callable

import jax

from lra_posenc.models.transformer import TransformerConfig

TRAIN_STEP_FACTOR = 3  # Forward, then gradients with respect to inputs and to weights.


def attention_flops(cfg: TransformerConfig, query_length: int, key_length: int) -> int:
  """Projections (query, key, value, output) and the two products over query-key pairs."""
  projections = 2 * cfg.emb_dim * cfg.qkv_dim * (2 * query_length + 2 * key_length)
  pairs = 2 * 2 * query_length * key_length * cfg.qkv_dim
  return projections + pairs


def mlp_flops(cfg: TransformerConfig, length: int) -> int:
  return 2 * 2 * length * cfg.emb_dim * cfg.mlp_dim


def encoder_flops(cfg: TransformerConfig, length: int) -> int:
  return cfg.num_layers * (attention_flops(cfg, length, length) + mlp_flops(cfg, length))


def decoder_flops(cfg: TransformerConfig, target_length: int, source_length: int) -> int:
  per_layer = (attention_flops(cfg, target_length, target_length) + attention_flops(cfg, target_length, source_length)
               + mlp_flops(cfg, target_length))
  return cfg.num_layers * per_layer


def classifier_flops(cfg: TransformerConfig, length: int, classifier_dim: int, num_classes: int) -> int:
  """One example of `length` encoder positions (with any CLS position) through encoder and MLP head."""
  return encoder_flops(cfg, length) + 2 * cfg.emb_dim * classifier_dim + 2 * classifier_dim * num_classes


def seq2seq_flops(cfg: TransformerConfig, source_length: int, target_length: int, target_vocab_size: int) -> int:
  """One sentence pair through encoder, decoder and output logits (teacher forcing)."""
  return (encoder_flops(cfg, source_length) + decoder_flops(cfg, target_length, source_length)
          + 2 * target_length * cfg.emb_dim * target_vocab_size)


def traced_matmul_flops(fn: Callable, *args) -> int:
  """2 x multiply-adds of every dot_general `fn(*args)` traces to (loops counted per trip)."""
  return _jaxpr_flops(jax.make_jaxpr(fn)(*args).jaxpr)


def _jaxpr_flops(jaxpr) -> int:
  total = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'dot_general':
      (lhs_contract, _), (lhs_batch, _) = eqn.params['dimension_numbers']
      lhs, rhs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
      shared = math.prod(lhs[i] for i in (*lhs_contract, *lhs_batch))
      total += 2 * math.prod(lhs) * math.prod(rhs) // shared
    if eqn.primitive.name == 'while':
      raise ValueError('a while loop has no static trip count; count its body separately')
    counts = [_jaxpr_flops(sub) for sub in _subjaxprs(eqn.params)]
    if eqn.primitive.name == 'cond':  # One branch runs: count the dearest.
      total += max(counts)
    else:
      total += eqn.params.get('length', 1) * sum(counts) if eqn.primitive.name == 'scan' else sum(counts)
  return total


def _subjaxprs(params: dict):
  for value in params.values():
    for item in value if isinstance(value, (tuple, list)) else (value,):
      if hasattr(item, 'eqns'):
        yield item
      elif hasattr(item, 'jaxpr') and hasattr(item.jaxpr, 'eqns'):
        yield item.jaxpr
