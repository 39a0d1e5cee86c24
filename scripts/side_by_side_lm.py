#!/usr/bin/env python3
"""Our language model's train step against nanoGPT's (PyTorch) and Flax's examples/lm1b, at equal shapes, in one
process.

    .venv/bin/python scripts/side_by_side_lm.py --nanogpt_model=/tmp/nanogpt_model.py \\
        --lm1b_models=/tmp/lm1b_models.py [--recipe=cpu|gpu] [--windows 8 --steps 5] [--output=FILE]

--nanogpt_model is karpathy/nanoGPT's `model.py` and --lm1b_models google/flax's `examples/lm1b/models.py`, saved
anywhere outside the project: each is read at run time, never copied in. nanoGPT needs PyTorch in this
environment (`pip install torch`; it is not a dependency of the package); without --nanogpt_model that pair is
skipped.

The shapes are those of `configs/lm/shakespeare_char.py`'s recipe (--recipe=cpu: 4 layers, d 128, 12 windows of
64 tokens, no dropout; gpu: 6 layers, d 384, 64 windows of 256, dropout 0.2), a vocabulary of 66, every position
a target. Two pairs, each side one AdamW step (weight decay 0.1, gradients clipped at norm 1) on one batch of
random ids:
- ours in nanoGPT's form (GELU, no biases, learned positions, tied embeddings: the recipe as it trains), through
  the trainer's own pmapped step (`benchmark.TrainStepTimer`), against nanoGPT's GPT and train.py's step
  (forward with the loss, backward, clip, AdamW step), float32, eager, as its README runs it on a CPU
  (--compile=False), with PyTorch's default threads;
- ours in lm1b's form (ReLU, biases, dropout also in the MLP's hidden layer) against lm1b's TransformerLM with
  learned positions (posemb_init N(0, 0.02)), tied logits, loss on its own shifted inputs, jitted with optax.
Windows of --steps steps rotate over the four (`benchmark.interleaved_windows`), so a machine that slows for a
while slows all alike.

Prints each side's build (compile) seconds and each round's ms/step as they end; then each side's median ms/step,
each pair's ratio ours/peer (below 1: ours is faster), the model GFLOP/s (the same matrix-product FLOPs of
`models.flops` for every side), this host's float32 matrix-product GFLOP/s measured in the same process, and the
CPU (`run_files.host_cpu`); --output writes them as JSON.
"""
import argparse
import functools
import importlib.util
import json
import os
import statistics
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from lra_posenc.config_files import load_config
from lra_posenc.data.files import written_whole
from lra_posenc.studies import benchmark
from lra_posenc.tasks import TASKS
from lra_posenc.training import run_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 66  # Tiny Shakespeare's 65 characters and the unknown one, as the task's benchmark_workload draws them.
RECIPES = {'cpu': 'cpu', 'gpu': None}  # --recipe -> the config's argument.


def load_module(path: str, name: str):
  spec = importlib.util.spec_from_file_location(name, path)
  if spec is None or not os.path.isfile(path):
    raise FileNotFoundError(f'{path!r}: no such file')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def our_config(path: str, recipe: str, *, lm1b_form: bool) -> ml_collections.ConfigDict:
  config = load_config(path, RECIPES[recipe])
  config.data.text_file = 'unused'  # The benchmark draws random ids; no text is read.
  if lm1b_form:
    config.model.update(activation='relu', use_bias=True, activation_dropout_rate=config.model.dropout_rate)
  return config


class NanoGPTStepTimer:
  """nanoGPT's GPT and the step of its train.py, in PyTorch on the CPU, timed a window at a time."""

  def __init__(self, model_path: str, config: ml_collections.ConfigDict):
    import torch  # Only this peer needs it.
    self._torch = torch
    module = load_module(model_path, 'nanogpt_model')
    model, batch, block = config.model, config.training.batch_size, config.data.block_size
    torch.manual_seed(0)
    self._model = module.GPT(module.GPTConfig(block_size=block, vocab_size=VOCAB, n_layer=model.num_layers,
                                              n_head=model.num_heads, n_embd=model.emb_dim,
                                              dropout=model.dropout_rate, bias=model.use_bias))
    self._model.train()
    optimizer = config.optimizer
    self._optimizer = self._model.configure_optimizers(optimizer.weight_decay, optimizer.learning_rate,
                                                       (optimizer.b1, optimizer.b2), 'cpu')
    self._clip = optimizer.grad_clip_norm
    ids = torch.from_numpy(np.random.default_rng(0).integers(1, VOCAB, (batch, block + 1)))
    self._inputs, self._targets = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    self.threads = torch.get_num_threads()
    self.run_window(1)

  def run_window(self, steps: int) -> float:
    torch = self._torch
    start = time.perf_counter()
    for _ in range(steps):
      _, loss = self._model(self._inputs, self._targets)
      loss.backward()
      torch.nn.utils.clip_grad_norm_(self._model.parameters(), self._clip)
      self._optimizer.step()
      self._optimizer.zero_grad(set_to_none=True)
    loss.item()
    return time.perf_counter() - start


class Lm1bStepTimer:
  """Flax's examples/lm1b TransformerLM: its model, a cross-entropy step with clipped AdamW, jitted."""

  def __init__(self, models_path: str, config: ml_collections.ConfigDict):
    models = load_module(models_path, 'lm1b_models')
    model, batch, block = config.model, config.training.batch_size, config.data.block_size
    peer_config = models.TransformerConfig(
        vocab_size=VOCAB, output_vocab_size=VOCAB, logits_via_embedding=True, emb_dim=model.emb_dim,
        num_heads=model.num_heads, num_layers=model.num_layers, qkv_dim=model.qkv_dim, mlp_dim=model.mlp_dim,
        max_len=block, dropout_rate=model.dropout_rate, attention_dropout_rate=model.attention_dropout_rate,
        deterministic=False, posemb_init=nn.initializers.normal(stddev=0.02))
    lm = models.TransformerLM(peer_config)
    self._inputs = jnp.asarray(np.random.default_rng(0).integers(1, VOCAB, (batch, block)), jnp.int32)
    self._params = models.TransformerLM(peer_config.replace(deterministic=True)).init(
        jax.random.PRNGKey(0), self._inputs)['params']
    optimizer = config.optimizer
    adamw = optax.chain(optax.clip_by_global_norm(optimizer.grad_clip_norm),
                        optax.adamw(optimizer.learning_rate, b1=optimizer.b1, b2=optimizer.b2, eps=optimizer.eps,
                                    weight_decay=optimizer.weight_decay))
    self._opt_state = adamw.init(self._params)
    self._key = jax.random.PRNGKey(1)

    def step(params, opt_state, inputs, key):
      def loss_fn(params):
        logits = lm.apply({'params': params}, inputs, rngs={'dropout': key})  # Predicts inputs, shifted inside.
        return optax.softmax_cross_entropy_with_integer_labels(logits, inputs).mean()

      loss, grads = jax.value_and_grad(loss_fn)(params)
      updates, opt_state = adamw.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state, loss

    self._step = jax.jit(step, donate_argnums=(0, 1)).lower(
        self._params, self._opt_state, self._inputs, self._key).compile()
    self.run_window(1)

  def run_window(self, steps: int) -> float:
    start = time.perf_counter()
    for index in range(steps):
      self._params, self._opt_state, loss = self._step(self._params, self._opt_state, self._inputs,
                                                       jax.random.fold_in(self._key, index))
    loss.block_until_ready()
    return time.perf_counter() - start


def compare(args: argparse.Namespace) -> dict[str, Any]:
  configs = {name: our_config(args.config, args.recipe, lm1b_form=form)
             for name, form in (('ours', False), ('ours_lm1b_form', True))}
  workloads = {name: TASKS[config.task].benchmark_workload(config) for name, config in configs.items()}
  builders = {name: functools.partial(benchmark.TrainStepTimer, workload) for name, workload in workloads.items()}
  builders['lm1b'] = functools.partial(Lm1bStepTimer, args.lm1b_models, configs['ours_lm1b_form'])
  pairs = {'lm1b': 'ours_lm1b_form'}
  if args.nanogpt_model:
    builders['nanogpt'] = functools.partial(NanoGPTStepTimer, args.nanogpt_model, configs['ours'])
    pairs['nanogpt'] = 'ours'
  timers = benchmark.built_timers(builders, report=benchmark.print_now)
  seconds = benchmark.interleaved_windows(timers, windows=args.windows, steps_per_window=args.steps,
                                             report=benchmark.print_now)
  step_seconds = {name: statistics.median(s) / args.steps for name, s in seconds.items()}
  config = configs['ours']
  batch = config.training.batch_size
  train_flops = workloads['ours'].forward_flops.train_step(batch, jax.device_count())
  host_cpu = run_files.host_cpu()
  return {
      'recipe': args.recipe,
      'shape': {'layers': config.model.num_layers, 'dim': config.model.emb_dim, 'heads': config.model.num_heads,
                'batch': batch, 'block': config.data.block_size, 'vocab': VOCAB,
                'dropout': config.model.dropout_rate},
      'ms_per_step': {name: 1e3 * s for name, s in step_seconds.items()},
      'best_ms_per_step': {name: 1e3 * min(s) / args.steps for name, s in seconds.items()},
      'ratio_ours_to_peer': {peer: step_seconds[ours] / step_seconds[peer] for peer, ours in pairs.items()},
      'model_gflops_per_second': {name: train_flops / s / 1e9 for name, s in step_seconds.items()},
      'matmul_gflops_per_second': benchmark.matmul_gflops(),
      'torch_threads': getattr(timers.get('nanogpt'), 'threads', None),
      'cpu': run_files.describe_cpu(host_cpu), 'host_cpu': host_cpu, 'jax': jax.__version__,
      'devices': jax.local_device_count(),
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--nanogpt_model', help="Path of karpathy/nanoGPT's model.py (needs PyTorch); or none.")
  parser.add_argument('--lm1b_models', required=True, help="Path of Flax's examples/lm1b/models.py.")
  parser.add_argument('--config', default=os.path.join(ROOT, 'configs/lm/shakespeare_char.py'),
                      help="Our side's config file (a language model's, with variants 'cpu' and the default).")
  parser.add_argument('--recipe', default='cpu', choices=sorted(RECIPES), help='Whose shapes: the config variant.')
  parser.add_argument('--windows', type=int, default=8)
  parser.add_argument('--steps', type=int, default=5)
  parser.add_argument('--output', help='Also write the figures to this JSON file.')
  args = parser.parse_args()
  figures = compare(args)
  shape, ms, gflops = figures['shape'], figures['ms_per_step'], figures['model_gflops_per_second']
  print(f"{figures['cpu']}, jax {figures['jax']}, torch threads {figures['torch_threads']}: --recipe={args.recipe}, "
        f"L{shape['layers']} d{shape['dim']} h{shape['heads']} batch {shape['batch']}x{shape['block']} "
        f"vocab {shape['vocab']} dropout {shape['dropout']}")
  for name in ms:
    print(f'{name:>15} {ms[name]:8.2f} ms/step ({gflops[name]:.1f} GFLOP/s)')
  for peer, ratio in figures['ratio_ours_to_peer'].items():
    print(f'ratio ours/{peer} {ratio:.3f}')
  print(f"float32 matmul {figures['matmul_gflops_per_second']:.0f} GFLOP/s")
  if args.output:
    with written_whole(args.output) as f:
      json.dump(figures, f, indent=2)


if __name__ == '__main__':
  main()
