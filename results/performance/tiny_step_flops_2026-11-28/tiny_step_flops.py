"""Matrix-product FLOPs of one `:tiny` train step per length bucket, as the benchmarks count them (3x the
forward pass, traced, nothing computed). Run from the repository root."""
import numpy as np

from lra_posenc.config_files import load_config
from lra_posenc.models import flops
from lra_posenc.training.batches import token_budget_batch_sizes
from lra_posenc.translation.translator import create_translator

config = load_config('configs/translation/multi30k.py', 'tiny')
vocab = config.data.tokenizer.vocab_size
model = create_translator(config, None, (vocab, vocab)).model
sizes = token_budget_batch_sizes(config.data.length_buckets, config.training.max_tokens, config.training.batch_size, 1)
print(f'vocab {vocab}, model {config.model.num_layers}+{config.model.num_layers} layers, d {config.model.emb_dim}')
total = []
for length, sentences in zip(config.data.length_buckets, sizes):
  example = np.ones((1, length), np.int32)
  counted = flops.forward_flops(lambda p, s, t: model.apply({'params': p}, s, t, train=False),
                                lambda rng: model.init({'params': rng}, example, example, train=False)['params'],
                                example, example)
  step = counted.train_step(sentences, 1)
  total.append(step)
  print(f'bucket {length:3d}: {sentences:4d} sentences, {step / 1e9:.1f} GFLOP a train step')
print(f'range {min(total) / 1e9:.1f}-{max(total) / 1e9:.1f} GFLOP; 10000 steps at the largest: '
      f'{max(total) * 1e4 / 1e15:.2f} PFLOP')
