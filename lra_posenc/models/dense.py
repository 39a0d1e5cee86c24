"""The projections' matrix product, with its gradients written as plain 2-D matrix products.

A projection (`nn.Dense`, or `nn.DenseGeneral` onto or from heads) contracts its input's trailing axes with its
kernel's leading ones, so it is one [tokens, k] x [k, n] product. Differentiated by JAX, the kernel's gradient
is a `dot_general` over the token axes, and XLA:CPU computes it from the output gradient transposed: it fuses
whatever produced that gradient (the MLP's GELU backward, three inputs and a tanh term) into a transposing copy,
elementwise work in column order. Written as inputs^T . gradient, the same sums, the copy moves only the inputs:
the language model's `:cpu` step took 0.768 times its time with `lax.dot_general` (PERFORMANCE.md). Values and
gradients are JAX's own up to the rounding of another summation order (tests/test_attention.py). On a GPU the
products go to cuBLAS either way; the step there has not been timed with this change. Being a `custom_vjp`, the
product has no forward-mode derivative (`jax.jvp`, `jax.jacfwd`), which nothing here takes.
"""
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import DTypeLike

Array = jax.Array


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _product(inputs: Array, kernel: Array, precision) -> Array:
  return jnp.dot(inputs, kernel, precision=precision)


def _product_forward(inputs: Array, kernel: Array, precision) -> tuple[Array, tuple[Array, Array]]:
  return _product(inputs, kernel, precision), (inputs, kernel)


def _product_backward(precision, residuals: tuple[Array, Array], gradient: Array) -> tuple[Array, Array]:
  inputs, kernel = residuals
  return (jnp.dot(gradient, kernel.T, precision=precision).astype(inputs.dtype),
          jnp.dot(inputs.T, gradient, precision=precision).astype(kernel.dtype))


_product.defvjp(_product_forward, _product_backward)


def dense_dot_general(inputs: Array, kernel: Array, dimension_numbers: lax.DotDimensionNumbers,
                      precision: lax.PrecisionLike = None, preferred_element_type: DTypeLike | None = None) -> Array:
  """`lax.dot_general` for a projection: `nn.Dense`'s and `nn.DenseGeneral`'s `dot_general`.

  Where the input's trailing axes contract with the kernel's leading ones and nothing is batched (every
  projection here), the product runs as [tokens, k] x [k, n] with the gradients above; any other contraction,
  or a `preferred_element_type`, is `lax.dot_general` itself.
  """
  (input_axes, kernel_axes), batch_axes = dimension_numbers
  contracted = len(input_axes)
  trailing = tuple(range(inputs.ndim - contracted, inputs.ndim))
  if (any(map(len, batch_axes)) or preferred_element_type is not None
      or tuple(axis % inputs.ndim for axis in input_axes) != trailing
      or tuple(axis % kernel.ndim for axis in kernel_axes) != tuple(range(contracted))):
    return lax.dot_general(inputs, kernel, dimension_numbers, precision=precision,
                           preferred_element_type=preferred_element_type)
  kept, contracted_shape, features = (inputs.shape[:inputs.ndim - contracted], kernel.shape[:contracted],
                                      kernel.shape[contracted:])
  size = math.prod(contracted_shape)
  out = _product(inputs.reshape(math.prod(kept), size), kernel.reshape(size, math.prod(features)), precision)
  return out.reshape(kept + features)
