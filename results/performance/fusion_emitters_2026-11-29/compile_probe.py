"""Where one case of tests/test_padding.py spends its time: initialisation, and tracing, lowering and
compiling the loss's gradient for the unpadded and the padded classifier, separately and as one program.

Run from the repository root, with the flags under test in XLA_FLAGS:
    XLA_FLAGS='--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false' \
        PYTHONPATH=.:tests python results/performance/fusion_emitters_2026-11-29/compile_probe.py alibi
"""
import sys
import time

import jax
import jax.numpy as jnp

import test_padding


def timed(label: str, function):
  start = time.perf_counter()
  value = jax.block_until_ready(function())
  print(f'{label} {time.perf_counter() - start:.2f} s')
  return value


def gradient(model, tokens, labels):
  def loss(params):
    logits = model.apply({'params': params}, tokens, train=False)
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=-1).mean(), logits
  return jax.value_and_grad(loss, has_aux=True)


def compile_times(label: str, function, params) -> None:
  start = time.perf_counter()
  traced = function.trace(params)
  traced_at = time.perf_counter()
  lowered = traced.lower()
  lowered_at = time.perf_counter()
  lowered.compile()
  print(f'{label}: trace {traced_at - start:.2f} s, lower {lowered_at - traced_at:.2f} s, '
        f'compile {time.perf_counter() - lowered_at:.2f} s')


def main(encoding: str) -> None:
  padded = test_padding.classifier(encoding, pooling='cls', length_multiple=8)
  plain = padded.clone(length_multiple=1)
  tokens, labels = test_padding.batch()
  initial = timed('initialisation, compiled', lambda: jax.jit(
      lambda t: plain.init({'params': jax.random.key(0)}, t, train=False)['params'])(tokens))
  params = timed('perturbed, op by op', lambda: test_padding.perturbed(initial))
  for name, model in (('unpadded', plain), ('padded', padded)):
    compile_times(name, jax.jit(gradient(model, tokens, labels)), params)
  compile_times('both as one program', jax.jit(
      lambda p: (gradient(plain, tokens, labels)(p), gradient(padded, tokens, labels)(p))), params)


if __name__ == '__main__':
  main(sys.argv[1])
