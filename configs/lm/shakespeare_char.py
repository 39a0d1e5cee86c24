"""Character-level language modelling of Tiny Shakespeare: nanoGPT's recipes, with every encoding.

GPU recipe, nanoGPT's config/train_shakespeare_char.py (6 layers, 6 heads, d 384, block 256, batch 64,
dropout 0.2, AdamW at 1e-3 after 100 warmup steps, cosine to 1e-4 at step 5000, beta2 0.99; nanoGPT's README
reports a best validation loss of 1.4697):
    python -m lra_posenc.lm.train --config=configs/lm/shakespeare_char.py --workdir=runs/lm_shakespeare \\
        --config.data.text_file=data/tinyshakespeare/input.txt
CPU recipe, the command of nanoGPT's README for a CPU (4 layers, 4 heads, d 128, block 64, batch 12, 2000
steps, no dropout; "a loss of only 1.88", on 20 evaluation batches):
    python -m lra_posenc.lm.train --config=configs/lm/shakespeare_char.py:cpu --workdir=runs/lm_cpu \\
        --config.data.text_file=data/tinyshakespeare/input.txt
As nanoGPT's train.py and model.py: pre-LayerNorm blocks, GELU, no biases, token embeddings tied to the output
layer, every weight N(0, 0.02) and the projections into the residual stream N(0, 0.02 / sqrt(2 layers)); weight
decay 0.1 on matrices and embeddings only, gradients clipped at norm 1. The text is cut as nanoGPT cuts it: the
first 90% trains, the last 10% validates (and is the split the best checkpoint is scored on).
Where it departs: the vocabulary is the training split's characters plus one for a character it lacks (66 for
Tiny Shakespeare, nanoGPT's 65 from the whole file); validation scores every character of the split once, in
non-overlapping windows of the block size (nanoGPT: the mean over random windows); flax's tanh-approximated GELU
and LayerNorm epsilon 1e-6 (PyTorch: exact GELU, 1e-5); warmup from 0 (nanoGPT: from lr / 101).
Select the encoding with --config.model.pos_encoding=NAME.
"""
import ml_collections

from lra_posenc import config_files, encodings

VARIANTS = (None, 'cpu')


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  # VARIANT, or VARIANT,encoding_module=PATH: an encoding outside the package, loaded (its options' section below).
  arg, encoding_module = config_files.config_argument(arg, VARIANTS)
  config = ml_collections.ConfigDict()
  config.task = 'lm'  # Which program trains it; config.json records it.
  config.seed = 0

  config.data = ml_collections.ConfigDict()
  config.data.text_file = ''  # One text file, cut into training and validation; or:
  config.data.data_dir = ''  # a directory of train.txt, valid.txt, test.txt (scripts/download_lm_data.py).
  config.data.validation_fraction = 0.1  # Of text_file: its last 10% validates, as nanoGPT's prepare.py.
  config.data.level = 'char'  # Or 'byte': UTF-8 bytes.
  config.data.block_size = 256  # Tokens a training window holds.
  # > 0: this fraction of training windows carry a passkey of passkey_length symbols (a needle at a random depth,
  # its query at the end; lra_posenc/lm/passkey.py), and the best checkpoint is scored on passkeys at every length.
  config.data.passkey_fraction = 0.0
  config.data.passkey_length = 4

  config.model = ml_collections.ConfigDict()
  config.model.emb_dim = 384
  config.model.num_heads = 6
  config.model.num_layers = 6
  config.model.qkv_dim = 384
  config.model.mlp_dim = 4 * 384
  config.model.dropout_rate = 0.2  # Of embeddings and of every sublayer's output.
  config.model.attention_dropout_rate = 0.2
  config.model.activation_dropout_rate = 0.0
  config.model.norm_position = 'pre'
  config.model.activation = 'gelu'
  config.model.use_bias = False
  config.model.init_std = 0.02
  config.model.pos_encoding = 'learned'
  config.model.pos_encoding_options = encodings.options_config()
  if encoding_module:
    config.model.pos_encoding_module = encoding_module
  # L > 0: randomized positions (Ruoss et al. 2023), sorted draws from [0, L) in training; L at least the
  # longest window scored.
  config.model.randomized_positions = 0
  # 'none': token embeddings N(0, init_std), as GPT-2's. 'sqrt_dim': N(0, 1/d), looked up times sqrt(d), of the
  # unit scale of a fixed table's entries (sinusoidal, chebyshev, legendre), as fairseq's language models.
  config.model.embedding_scaling = 'none'
  config.model.dtype = 'float32'
  config.model.attention_implementation = 'auto'
  config.model.remat = False

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.schedule = 'cosine'
  config.optimizer.learning_rate = 1e-3
  config.optimizer.min_learning_rate = 1e-4  # Where the cosine ends, at training.num_train_steps.
  config.optimizer.warmup_steps = 100
  config.optimizer.b1 = 0.9
  config.optimizer.b2 = 0.99
  config.optimizer.eps = 1e-8
  config.optimizer.weight_decay = 0.1
  config.optimizer.grad_clip_norm = 1.0

  config.training = ml_collections.ConfigDict()
  config.training.batch_size = 64
  config.training.num_train_steps = 5000
  config.training.patience = 0
  config.training.log_every_steps = 50

  config.evaluation = ml_collections.ConfigDict()
  config.evaluation.batch_size = 64
  config.evaluation.every_steps = 250
  config.evaluation.selection_metric = 'log_likelihood'  # Minus the validation loss: higher is better.
  config.evaluation.average_last = 0

  # The best checkpoint scored on the test splits in windows of block_size times each multiple (Press et al.
  # 2022); RoPE's options that stretch positions (position interpolation, NTK-aware scaling, YaRN) are also scored
  # set to the ratio, zero-shot.
  config.scoring = ml_collections.ConfigDict()
  config.scoring.length_multiples = (1, 2, 4, 8, 16)
  config.scoring.sliding_stride = 0  # > 0: windows slide by this many tokens, each scoring its last ones.
  config.scoring.stretch_options = ('interpolation_factor', 'ntk_factor', 'yarn_factor')
  # A model trained on randomized positions: 'drawn' reads it as Ruoss et al.'s code does, at sorted positions drawn
  # as in training, the loss averaged over position_draws passes, and also at 0 ... length - 1 ('by_length_sequential');
  # 'sequential' only at 0 ... length - 1.
  config.scoring.positions = 'drawn'
  config.scoring.position_draws = 4
  # With passkeys: windows at each of passkey_depths depths of the needle (start of the window to just before the
  # query), passkey_trials at each, at every length.
  config.scoring.passkey_depths = 8
  config.scoring.passkey_trials = 16

  config.checkpoint = ml_collections.ConfigDict()
  config.checkpoint.every_steps = 250
  config.checkpoint.max_to_keep = 2

  if arg == 'cpu':
    config.data.block_size = 64
    config.model.update(emb_dim=128, qkv_dim=128, mlp_dim=4 * 128, num_heads=4, num_layers=4, dropout_rate=0.0,
                        attention_dropout_rate=0.0)
    config.training.update(batch_size=12, num_train_steps=2000)
    config.evaluation.update(batch_size=256)
  return config
