"""Samples text from the best checkpoint of a language-modelling workdir, token by token with a key/value cache.

    python -m lra_posenc.lm.sample --workdir=runs/lm_cpu --prompt="ROMEO:" --num_tokens=500 \\
        --temperature=0.8 --top_k=200 --seed=1337

The workdir's config.json, vocabulary (artifacts.json) and best checkpoint define the model. Each token is drawn
from the model's distribution over the tokens before it, sharpened by `temperature` (0: the most likely) and cut
to the `top_k` most likely (0: all); `seed` fixes the draws. The context is the training positions
(`data.block_size`, or model.randomized_positions where larger), as nanoGPT's sample.py crops it: when it is
full, the last half of it starts a fresh cache at position 0.
"""
import dataclasses
import functools
import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from lra_posenc.lm import settings
from lra_posenc.lm.input_pipeline import Vocabulary
from lra_posenc.models import decoding
from lra_posenc.models.language_model import LanguageModel
from lra_posenc.training import cli
from lra_posenc.training.checkpointing import read_config, restore_best
from lra_posenc.training.run_files import quiet_checkpoint_logs, read_json
from lra_posenc.validation import check_range


@dataclasses.dataclass(frozen=True)
class Sampler:
  """A trained language model, its vocabulary and parameters, ready to draw text."""
  model: LanguageModel
  vocabulary: Vocabulary
  params: Any

  @classmethod
  def from_workdir(cls, workdir: str) -> 'Sampler':
    config = read_config(workdir, settings.CONFIG_HISTORY)
    vocabulary = Vocabulary.from_artifact(read_json(os.path.join(workdir, 'artifacts.json'))['vocabulary'])
    data = settings.read_data(config.data)
    model = settings.read_model(config.model, data, vocab_size=data.model_vocab_size(vocabulary.size))
    _, params, _ = restore_best(workdir, settings.CONFIG_HISTORY)
    return cls(model, vocabulary, params)

  @functools.cached_property
  def _draw(self):
    """(tokens [rows, context], prompt length, rng, temperature, top_k) -> tokens, drawn after the prompt."""
    stepper = self.model.clone(decode=True)
    context = self.model.config.max_len

    def draw(params, tokens, prompt_length, rng, temperature, top_k):
      cache = stepper.init(jax.random.PRNGKey(0), jnp.ones((tokens.shape[0], context), jnp.int32),
                           train=False)['cache']
      cache = jax.tree.map(jnp.zeros_like, cache)

      def step(token, cache):
        logits, updated = stepper.apply({'params': params, 'cache': cache}, token, train=False, mutable=['cache'])
        return logits[:, 0, :self.vocabulary.size], updated['cache']  # Text only: never a passkey's ids.

      return decoding.sample(step, cache, tokens, prompt_length=prompt_length, rng=rng, temperature=temperature,
                             top_k=top_k)

    return jax.jit(draw, static_argnames=('temperature', 'top_k'))

  def sample(self, prompt: str, *, num_tokens: int, num_samples: int = 1, temperature: float = 0.8,
             top_k: int = 200, seed: int = 0) -> list[str]:
    """`num_samples` continuations of `prompt`, each the prompt and `num_tokens` tokens drawn after it."""
    check_range('num_tokens', num_tokens, at_least=1)
    check_range('num_samples', num_samples, at_least=1)
    check_range('temperature', temperature, at_least=0)
    check_range('top_k', top_k, at_least=0)
    prompt_ids, unknown = self.vocabulary.encode(prompt)
    if not len(prompt_ids):
      raise ValueError('the prompt is empty; give at least one character (nanoGPT starts from a newline)')
    if unknown:
      raise ValueError(f'the prompt has {unknown} character(s) the vocabulary lacks; it holds '
                       f'{self.vocabulary.symbols!r}')
    context = self.model.config.max_len
    ids = np.tile(prompt_ids, (num_samples, 1))
    rng = jax.random.PRNGKey(seed)
    target = ids.shape[1] + num_tokens
    while ids.shape[1] < target:
      kept = ids[:, -max(1, context // 2):] if ids.shape[1] >= context else ids
      tokens = np.zeros((num_samples, context), np.int32)
      tokens[:, :kept.shape[1]] = kept
      rng, key = jax.random.split(rng)
      drawn = np.asarray(self._draw(self.params, tokens, kept.shape[1], key, temperature, top_k))
      new = min(context - kept.shape[1], target - ids.shape[1])
      ids = np.concatenate([ids, drawn[:, kept.shape[1]:kept.shape[1] + new]], axis=1)
    return [self.vocabulary.decode(row) for row in ids]


def main(argv: Sequence[str]) -> None:
  del argv
  quiet_checkpoint_logs()
  sampler = Sampler.from_workdir(flags.FLAGS.workdir)
  for text in sampler.sample(flags.FLAGS.prompt, num_tokens=flags.FLAGS.num_tokens,
                             num_samples=flags.FLAGS.num_samples, temperature=flags.FLAGS.temperature,
                             top_k=flags.FLAGS.top_k, seed=flags.FLAGS.seed):
    print(text)
    print('---------------')


if __name__ == '__main__':
  flags.DEFINE_string('workdir', None, 'A workdir written by lra_posenc.lm.train.')
  flags.DEFINE_string('prompt', '\n', 'The text to continue.')
  flags.DEFINE_integer('num_tokens', 500, 'Tokens drawn after the prompt.')
  flags.DEFINE_integer('num_samples', 1, 'How many continuations.')
  flags.DEFINE_float('temperature', 0.8, '1: the model\'s distribution; lower is sharper; 0: the most likely token.')
  flags.DEFINE_integer('top_k', 200, 'Draw from the k most likely tokens only (0: all).')
  flags.DEFINE_integer('seed', 1337, 'Fixes the draws.')
  flags.mark_flag_as_required('workdir')
  cli.run(main)
