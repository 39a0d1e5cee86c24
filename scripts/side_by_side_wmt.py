#!/usr/bin/env python3
"""Our translation train step against Flax's examples/wmt Transformer at equal shapes, in one process.

    .venv/bin/python scripts/side_by_side_wmt.py --peer_models=/tmp/wmt_models.py \\
        [--layers 4 --dim 128 --heads 4 --mlp 256 --batch 128 --length 32 --vocab 8000 --dropout 0.3 --dtype bfloat16]

--peer_models is `examples/wmt/models.py` of google/flax, saved anywhere outside the project:
it is read at run time, never copied in. Both sides take one AdamW step on one batch of random
ids (every position real), with dropout --dropout on embeddings, sublayer outputs, attention
weights and the MLP's hidden layer, shared embeddings and tied logits; ours runs through the
trainer's own pmapped step (`benchmark.TrainStepTimer`), pre-LN with ReLU as the peer, with
--encoding as its positional encoding. Windows of --steps steps alternate between the two
(`benchmark.interleaved_windows`), so a machine that slows for a while slows both alike.

Prints each side's build (compile) seconds and each round's ms/step as it goes; then each side's median
ms/step, the ratio ours/peer (below 1: ours is faster), the model GFLOP/s each achieves (the same
matrix-product FLOPs of `models.flops`), this host's float32 matrix product GFLOP/s measured in the same
process, and the CPU (model, family, model number, vector extensions: `run_files.host_cpu`); --output
writes them as JSON.
"""
import argparse
import importlib.util
import json
import os
import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from lra_posenc.config_files import load_config
from lra_posenc.data.files import written_whole
from lra_posenc.models.transformer import DTYPES
from lra_posenc.studies import benchmark
from lra_posenc.tasks import TASKS
from lra_posenc.training import run_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MULTI30K_CONFIG = os.path.join(ROOT, 'configs/translation/multi30k.py')  # Its task's benchmark workload: TASKS.


class PeerStepTimer:
  """Flax's examples/wmt Transformer: its model, a cross-entropy step with AdamW, timed a window at a time."""

  def __init__(self, models_path: str, args: argparse.Namespace):
    spec = importlib.util.spec_from_file_location('peer_models', models_path)
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    config = models.TransformerConfig(
        vocab_size=args.vocab, output_vocab_size=args.vocab, share_embeddings=True, logits_via_embedding=True,
        emb_dim=args.dim, num_heads=args.heads, num_layers=args.layers, qkv_dim=args.dim, mlp_dim=args.mlp,
        max_len=max(256, args.length), dropout_rate=args.dropout, attention_dropout_rate=args.dropout,
        deterministic=False, dtype=jnp.dtype(args.dtype))
    model = models.Transformer(config)
    rng = np.random.default_rng(0)
    self._inputs, self._targets = (jnp.asarray(rng.integers(3, args.vocab, (args.batch, args.length)), jnp.int32)
                                   for _ in range(2))
    self._params = models.Transformer(config.replace(deterministic=True)).init(
        jax.random.PRNGKey(0), self._inputs, self._targets)['params']
    optimizer = optax.adamw(1e-3, b1=0.9, b2=0.98, eps=1e-9)
    self._opt_state = optimizer.init(self._params)
    self._key = jax.random.PRNGKey(1)

    def step(params, opt_state, inputs, targets, key):
      def loss_fn(params):
        logits = model.apply({'params': params}, inputs, targets, rngs={'dropout': key})
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

      loss, grads = jax.value_and_grad(loss_fn)(params)
      updates, opt_state = optimizer.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state, loss

    self._step = jax.jit(step, donate_argnums=(0, 1)).lower(
        self._params, self._opt_state, self._inputs, self._targets, self._key).compile()
    self.run_window(1)

  def run_window(self, steps: int) -> float:
    """Seconds for `steps` steps, synchronised at the end."""
    start = time.perf_counter()
    for index in range(steps):
      self._params, self._opt_state, loss = self._step(self._params, self._opt_state, self._inputs, self._targets,
                                                       jax.random.fold_in(self._key, index))
    loss.block_until_ready()
    return time.perf_counter() - start


def our_config(args: argparse.Namespace) -> ml_collections.ConfigDict:
  """The translation config at the peer's shapes and dropout sites."""
  config = load_config(MULTI30K_CONFIG, 'cpu')
  config.model.update(emb_dim=args.dim, qkv_dim=args.dim, mlp_dim=args.mlp, num_heads=args.heads,
                      num_layers=args.layers, dropout_rate=args.dropout, attention_dropout_rate=args.dropout,
                      activation_dropout_rate=args.dropout, activation='relu', norm_position='pre',
                      pos_encoding=args.encoding, dtype=args.dtype)
  config.data.update(max_length=args.length, length_buckets=(args.length,))
  config.data.tokenizer.vocab_size = args.vocab
  config.training.batch_size = args.batch
  config.optimizer.weight_decay = 0.0
  return config


def compare(args: argparse.Namespace) -> dict[str, Any]:
  config = our_config(args)
  workload = TASKS[config.task].benchmark_workload(config)
  timers = benchmark.built_timers({'ours': lambda: benchmark.TrainStepTimer(workload),
                                      'peer': lambda: PeerStepTimer(args.peer_models, args)},
                                     report=benchmark.print_now)
  seconds = benchmark.interleaved_windows(timers, windows=args.windows, steps_per_window=args.steps,
                                             report=benchmark.print_now)
  step_seconds = {name: statistics.median(s) / args.steps for name, s in seconds.items()}
  train_flops = workload.forward_flops.train_step(args.batch, jax.device_count())
  host_cpu = run_files.host_cpu()
  return {
      'shape': {key: getattr(args, key) for key in ('layers', 'dim', 'heads', 'mlp', 'batch', 'length', 'vocab',
                                                    'dropout', 'encoding', 'dtype')},
      'ms_per_step': {name: 1e3 * s for name, s in step_seconds.items()},
      'best_ms_per_step': {name: 1e3 * min(s) / args.steps for name, s in seconds.items()},
      'ratio_ours_to_peer': step_seconds['ours'] / step_seconds['peer'],
      'model_gflops_per_second': {name: train_flops / s / 1e9 for name, s in step_seconds.items()},
      'matmul_gflops_per_second': benchmark.matmul_gflops(),
      'cpu': run_files.describe_cpu(host_cpu), 'host_cpu': host_cpu, 'jax': jax.__version__,
      'devices': jax.local_device_count(),
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--peer_models', required=True, help="Path of Flax's examples/wmt/models.py.")
  for flag, default in (('layers', 3), ('dim', 256), ('heads', 4), ('mlp', 1024), ('batch', 32), ('length', 32),
                        ('vocab', 8000), ('windows', 8), ('steps', 5)):
    parser.add_argument(f'--{flag}', type=int, default=default)
  parser.add_argument('--dropout', type=float, default=0.1)
  parser.add_argument('--dtype', default='float32', choices=sorted(DTYPES),
                      help='What both sides compute their matrix products in (parameters stay float32).')
  parser.add_argument('--encoding', default='sinusoidal', help='Our positional encoding (the peer: sinusoidal).')
  parser.add_argument('--output', help='Also write the figures to this JSON file.')
  args = parser.parse_args()
  figures = compare(args)
  ms, gflops = figures['ms_per_step'], figures['model_gflops_per_second']
  print(f"{figures['cpu']}, jax {figures['jax']}: L{args.layers} d{args.dim} h{args.heads} mlp{args.mlp} "
        f"batch {args.batch}x{args.length} vocab {args.vocab} dropout {args.dropout}")
  print(f"ours ({args.encoding}) {ms['ours']:.1f} ms/step ({gflops['ours']:.0f} GFLOP/s), peer flax/wmt "
        f"{ms['peer']:.1f} ms/step ({gflops['peer']:.0f} GFLOP/s): "
        f"ratio ours/peer {figures['ratio_ours_to_peer']:.3f}; "
        f"float32 matmul {figures['matmul_gflops_per_second']:.0f} GFLOP/s")
  if args.output:
    with written_whole(args.output) as f:
      json.dump(figures, f, indent=2)


if __name__ == '__main__':
  main()
