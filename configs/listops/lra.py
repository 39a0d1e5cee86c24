"""ListOps as in the Long Range Arena, and a CPU-sized variant.

LRA setting (max_length 2000, 4 layers, d 512, 8 heads, mlp 1024, batch 32, 5000 steps):
    python -m lra_posenc.listops.train --config=configs/listops/lra.py --workdir=runs/listops_lra
CPU variant (short expressions, small model; a few minutes on 2 cores):
    python -m lra_posenc.listops.train --config=configs/listops/lra.py:cpu --workdir=runs/listops_cpu
Sweep variant (the CPU model on expressions under 64 tokens drawn from a depth-6, 8-argument
generator, whose longer expressions then test length generalisation; lra_posenc.studies.sweep):
    python -m lra_posenc.listops.train --config=configs/listops/lra.py:sweep --workdir=runs/listops_sweep
Chebyshev-PE study's data (depth 7, 7 arguments, 250-1000 tokens, label = value mod 2), the CPU
model trained from scratch; add --config.model.pos_encoding_placement=after_encoder for its placement:
    python -m lra_posenc.listops.train --config=configs/listops/lra.py:chebyshev_study \\
        --workdir=runs/chebyshev_study --config.model.pos_encoding=chebyshev
Fused variant: the LRA setting in the form cuDNN's fused attention trains, which
model.attention_implementation='auto' then takes on NVIDIA GPUs. It departs from LRA in three ways:
matrix products in bfloat16; no attention dropout (cuDNN does not expose the weights to drop); the
2001 positions ([CLS] included) padded to 2048, masked as keys (cuDNN trains with a bias or key
padding only at even lengths; the same model, whose outputs differ only by rounding and dropout masks):
    python -m lra_posenc.listops.train --config=configs/listops/lra.py:fused --workdir=runs/listops_fused
Select the encoding with --config.model.pos_encoding=NAME (see lra_posenc.encodings.REGISTRY)
and its options with --config.model.pos_encoding_options.NAME.KEY=VALUE.
"""
import math

import ml_collections

from lra_posenc import config_files, encodings


VARIANTS = (None, 'cpu', 'sweep', 'chebyshev_study', 'fused')


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  # VARIANT, or VARIANT,encoding_module=PATH: an encoding outside the package, loaded (its options' section below).
  arg, encoding_module = config_files.config_argument(arg, VARIANTS)
  cpu = arg in ('cpu', 'sweep', 'chebyshev_study')
  config = ml_collections.ConfigDict()
  config.task = 'listops'  # Which program trains it; config.json records it.
  config.seed = 0

  config.data = ml_collections.ConfigDict()
  config.data.data_dir = ''  # Empty: generate into WORKDIR/data from data.generator.
  config.data.max_length = 2000
  config.data.num_classes = 10
  config.data.on_invalid = 'raise'  # Or 'skip': drop invalid rows and count them by reason.
  config.data.generator = ml_collections.ConfigDict(dict(
      seed=0, num_train_samples=96000, num_valid_samples=2000, num_test_samples=2000,
      max_depth=10, max_args=10, longer_than=500, shorter_than=2000, label_modulus=10))
  # Label-preserving changes to training expressions, each a probability (lra_posenc/listops/augment.py):
  # permute a list's arguments; replace a list below the root by its value. Done in Python on the host, in
  # the train loop's thread: 30-50 ms per batch of 32 LRA-length expressions on a shared 2-core CPU.
  config.data.augment = ml_collections.ConfigDict(dict(shuffle_arguments=0.0, contract_subtrees=0.0))

  config.model = ml_collections.ConfigDict()
  config.model.emb_dim = 512
  config.model.num_heads = 8
  config.model.num_layers = 4
  config.model.qkv_dim = 512
  config.model.mlp_dim = 1024
  config.model.classifier_dim = 1024
  config.model.dropout_rate = 0.1  # Of embeddings and of every sublayer's output.
  config.model.attention_dropout_rate = 0.1
  config.model.activation_dropout_rate = 0.1  # Of the MLP's hidden layer.
  config.model.norm_position = 'pre'  # Or 'post' (Vaswani et al.).
  config.model.activation = 'gelu'  # Or 'relu'.
  config.model.pooling = 'cls'
  config.model.pos_encoding = 'sinusoidal'
  config.model.pos_encoding_placement = 'input'  # Or 'after_encoder' (the Chebyshev-PE study's placement).
  # L > 0: randomized positions (Ruoss et al. 2023), sorted draws from [0, L) instead of 0 ... T-1, for
  # length generalisation: L at least the longest test input. lra_posenc/models/classifier.py.
  config.model.randomized_positions = 0
  config.model.pos_encoding_options = encodings.options_config()
  if encoding_module:
    config.model.pos_encoding_module = encoding_module
  config.model.dtype = 'float32'  # Or 'bfloat16': matrix products in bfloat16, parameters in float32.
  # 'auto': cuDNN's fused attention on NVIDIA GPUs wherever it can serve a call (bfloat16, no attention
  # dropout, ...), XLA elsewhere; the path and why is logged and in results.json. Or 'xla', or 'cudnn'.
  config.model.attention_implementation = 'auto'
  config.model.remat = False  # True: recompute each block's activations in the backward pass (less memory).
  # > 1: attention over the encoder's positions padded at the end to a multiple of this (masked keys), for
  # cuDNN, which trains with a bias or key padding only at even lengths. The same parameters and, up to
  # rounding, outputs; dropout in the blocks draws its masks over the padded shape.
  config.model.length_multiple = 1

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.schedule = 'rsqrt'
  config.optimizer.learning_rate = 0.05 / math.sqrt(1000)  # LRA: 0.05 * rsqrt(max(step, warmup)), peak here.
  config.optimizer.min_learning_rate = 0.0  # Where a cosine schedule ends.
  config.optimizer.warmup_steps = 1000
  config.optimizer.b1 = 0.9
  config.optimizer.b2 = 0.98
  config.optimizer.eps = 1e-9
  config.optimizer.weight_decay = 0.1
  config.optimizer.grad_clip_norm = 0.0

  config.training = ml_collections.ConfigDict()
  config.training.batch_size = 32
  config.training.num_train_steps = 5000
  config.training.patience = 0  # > 0: stop after this many evaluations without a better validation accuracy.
  config.training.log_every_steps = 100

  config.evaluation = ml_collections.ConfigDict()
  config.evaluation.batch_size = 256
  config.evaluation.every_steps = 500
  config.evaluation.selection_metric = 'accuracy'  # What picks the best checkpoint (validation, higher is better).
  # > 0: also score the mean of the parameters of the last this many evaluations (checkpoint averaging).
  config.evaluation.average_last = 0

  config.checkpoint = ml_collections.ConfigDict()
  config.checkpoint.every_steps = 500
  config.checkpoint.max_to_keep = 2

  if cpu:  # ~2 minutes on 2 CPU cores; test accuracy ~0.45 against a ~0.13 majority class.
    config.data.max_length = 64
    config.data.generator.update(num_train_samples=20000, num_valid_samples=1000, num_test_samples=1000,
                                 max_depth=3, max_args=5, longer_than=10, shorter_than=64)
    config.model.update(emb_dim=64, qkv_dim=64, mlp_dim=128, classifier_dim=128, num_heads=4, num_layers=2,
                        dropout_rate=0.0, attention_dropout_rate=0.0, activation_dropout_rate=0.0)
    config.optimizer.update(learning_rate=1e-3, warmup_steps=200)
    config.training.update(batch_size=32, num_train_steps=3000, log_every_steps=100)
    config.evaluation.update(every_steps=250)
    config.checkpoint.update(every_steps=250)
  if arg == 'sweep':  # Lengths 11-63 in training; the generator reaches ~500 tokens for length tests.
    config.data.generator.update(max_depth=6, max_args=8)
  if arg == 'chebyshev_study':  # Parity: 0.5 is chance, not comparable with 10-class LRA scores.
    config.data.update(max_length=1000, num_classes=2)
    config.data.generator.update(num_train_samples=10000, num_valid_samples=500, num_test_samples=500,
                                 max_depth=7, max_args=7, longer_than=250, shorter_than=1000, label_modulus=2)
    config.training.update(batch_size=16, num_train_steps=1000)
    config.evaluation.update(batch_size=64, every_steps=250)
  if arg == 'fused':  # 2000 tokens and [CLS]: 2001 positions, padded to 2048.
    config.model.update(dtype='bfloat16', attention_dropout_rate=0.0, length_multiple=128)
  return config
