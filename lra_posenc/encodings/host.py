"""Evaluates encoding tables in float64 on the host CPU, whatever the accelerator.

Three-term recurrences lose accuracy in float32 (errors of 1e-1 at 4096x1024 for
Chebyshev), and TPUs have no float64. Every host has a CPU backend, so tables are
built there once per shape with float64 enabled and handed to the model as float32
constants. `ensure_compile_time_eval` keeps this working when the first request for
a table comes from inside a traced model function.
"""
from typing import Any, Callable

import jax
import numpy as np


def evaluate_on_host(fn: Callable[..., jax.Array], *args: np.ndarray, **static: Any) -> np.ndarray:
  """Runs `fn(*args, **static)` in float64 on the CPU; returns a read-only float32 array."""
  cpu = jax.devices('cpu')[0]
  with jax.enable_x64(True), jax.ensure_compile_time_eval():
    inputs = [jax.device_put(np.asarray(a, np.float64), cpu) for a in args]
    table = np.asarray(fn(*inputs, **static)).astype(np.float32)
  table.flags.writeable = False
  return table
