"""Matrix-product FLOPs of the models, for model FLOPs utilisation (MFU).

The usual MFU convention: 2 FLOPs per multiply-add of every matrix product the model
computes (attention over all query-key pairs, causal or not), nothing for element-wise work,
and a training step at 3x the forward pass. The products are counted from the traced forward
pass, so those an encoding adds (Transformer-XL's and CoPE's, FIRE's MLP over position pairs)
count too; the tests hold the count to the closed form of a Transformer without an encoding.
"""
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

TRAIN_STEP_FACTOR = 3  # Forward, then gradients with respect to inputs and to weights.


def forward_flops(forward: Callable, init: Callable[[jax.Array], Any], *example: np.ndarray) -> int:
  """Matrix-product FLOPs of `forward(params, *example)`, params shaped as `init(rng)` makes them.

  Nothing is computed: `init` runs abstractly and `forward` is only traced.
  """
  return traced_matmul_flops(forward, jax.eval_shape(init, jax.random.key(0)), *example)


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
