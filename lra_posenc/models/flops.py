"""Matrix-product FLOPs of the models, for model FLOPs utilisation (MFU).

The usual MFU convention: 2 FLOPs per multiply-add of every matrix product the model
computes (attention over all query-key pairs, causal or not), nothing for element-wise work,
and a training step at 3x the forward pass. The products are counted from the traced forward
pass, so those an encoding adds (Transformer-XL's and CoPE's, FIRE's MLP over position pairs)
count too, each as often as it runs: per example, or once per call for products of positions
alone. Trace attention on XLA's path: a fused cuDNN call hides its products from the trace. The
tests hold the count to the closed form of a Transformer without an encoding.
"""
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

TRAIN_STEP_FACTOR = 3  # Forward, then gradients with respect to inputs and to weights.


@dataclasses.dataclass(frozen=True)
class ForwardFlops:
  """Matrix-product FLOPs of a forward pass: those per example, and those done once per call whatever its
  batch (an encoding's products of positions alone, e.g. an MLP over position pairs)."""
  per_example: int
  per_call: int

  def train_step(self, examples: int, calls: int) -> int:
    """A training step over `examples` in `calls` forward calls (one per device): 3x the forward pass."""
    return TRAIN_STEP_FACTOR * (self.per_example * examples + self.per_call * calls)


def forward_flops(forward: Callable, init: Callable[[jax.Array], Any], *example: np.ndarray) -> ForwardFlops:
  """Matrix-product FLOPs of `forward(params, *example)` (a batch of one), params shaped as `init(rng)`
  makes them; traced at batches of one and two, whose difference is the per-example part.

  Nothing is computed: `init` runs abstractly and `forward` is only traced.
  """
  params = jax.eval_shape(init, jax.random.key(0))
  one = traced_matmul_flops(forward, params, *example)
  two = traced_matmul_flops(forward, params, *(np.concatenate([array, array]) for array in example))
  return ForwardFlops(per_example=two - one, per_call=2 * one - two)


def traced_matmul_flops(fn: Callable, *args: Any) -> int:
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
