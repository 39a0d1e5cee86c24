"""Generation over a step function with a key/value cache, jit-compatible: greedy and beam search (the
translation decoder's), and sampling (a language model's).

A step function maps (tokens [rows, 1], cache) to (logits [rows, vocab], cache); the
cache's leaves carry the rows on axis 0 (scalar leaves, like a step counter, are shared).
Both searches return ids [batch, max_length] ending with `eos_id` then `pad_id` (or cut
off at max_length).
"""
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array
Cache = Any
StepFn = Callable[[Array, Cache], tuple[Array, Cache]]

NEG_INF = -1.0e9  # Finite, so that NEG_INF - NEG_INF stays a number.


def greedy_search(step_fn: StepFn, cache: Cache, *, batch_size: int, max_length: int, bos_id: int,
                  eos_id: int, pad_id: int = 0) -> Array:
  """Picks the most likely next token until every row has emitted `eos_id` or max_length is reached."""
  tokens = jnp.full((batch_size, max_length + 1), pad_id, jnp.int32).at[:, 0].set(bos_id)

  def not_done(state):
    i, _, _, finished = state
    return (i < max_length) & ~finished.all()

  def step(state):
    i, tokens, cache, finished = state
    logits, cache = step_fn(jax.lax.dynamic_slice_in_dim(tokens, i, 1, axis=1), cache)
    next_token = jnp.where(finished, pad_id, jnp.argmax(logits, axis=-1).astype(jnp.int32))
    tokens = jax.lax.dynamic_update_slice_in_dim(tokens, next_token[:, None], i + 1, axis=1)
    return i + 1, tokens, cache, finished | (next_token == eos_id)

  state = (jnp.int32(0), tokens, cache, jnp.zeros((batch_size,), bool))
  return jax.lax.while_loop(not_done, step, state)[1][:, 1:]


def length_penalty(length: Array, alpha: float) -> Array:
  """GNMT's ((5 + length) / 6) ** alpha; alpha = 0 ranks by total log-probability."""
  return ((5.0 + length) / 6.0) ** alpha


def tile_beams(tree: Any, beam_size: int) -> Any:
  """Repeats every row `beam_size` times: [batch, ...] -> [batch * beam_size, ...]."""
  return jax.tree.map(lambda x: x if x.ndim == 0 else jnp.repeat(x, beam_size, axis=0), tree)


def _gather_beams(tree: Any, beam_indices: Array) -> Any:
  """Picks beams per row from [batch, beams, ...] leaves: -> [batch, new_beams, ...]."""
  def gather(x):
    indices = beam_indices.reshape(beam_indices.shape + (1,) * (x.ndim - 2))
    return jnp.take_along_axis(x, indices, axis=1)
  return jax.tree.map(gather, tree)


def _gather_cache_beams(cache: Cache, beam_indices: Array) -> Cache:
  """`_gather_beams` for a cache whose leaves are [batch * beams, ...] (scalar leaves are shared)."""
  batch_size, beams = beam_indices.shape

  def gather(x):
    if x.ndim == 0:
      return x
    picked = _gather_beams(x.reshape((batch_size, -1) + x.shape[1:]), beam_indices)
    return picked.reshape((batch_size * beams,) + x.shape[1:])

  return jax.tree.map(gather, cache)


def beam_search(step_fn: StepFn, cache: Cache, *, batch_size: int, beam_size: int, max_length: int,
                alpha: float, bos_id: int, eos_id: int, pad_id: int = 0) -> Array:
  """The best finished hypothesis per row under GNMT length normalisation.

  `cache` must already hold `beam_size` rows per batch row (`tile_beams`). As in fairseq,
  a hypothesis ends only when its end ranks among the `beam_size` best candidates of its
  step, and a row is done once it has `beam_size` ended hypotheses; so beam size 1 is
  greedy search, whatever the length penalty.
  """
  k = beam_size
  sequences = jnp.full((batch_size, k, max_length + 1), pad_id, jnp.int32).at[:, :, 0].set(bos_id)
  live_log_probs = jnp.tile(jnp.asarray([0.0] + [NEG_INF] * (k - 1)), (batch_size, 1))
  finished_scores = jnp.full((batch_size, k), NEG_INF)
  state = dict(i=jnp.int32(0), live=sequences, live_log_probs=live_log_probs, finished=sequences,
               finished_scores=finished_scores, finished_flags=jnp.zeros((batch_size, k), bool), cache=cache)

  def not_done(s):
    return (s['i'] < max_length) & ~s['finished_flags'].all()

  def step(s):
    i = s['i']
    tokens = jax.lax.dynamic_slice_in_dim(s['live'], i, 1, axis=2).reshape(batch_size * k, 1)
    logits, cache = step_fn(tokens, s['cache'])
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32)).reshape(batch_size, k, -1)
    vocab_size = log_probs.shape[-1]
    candidates = (s['live_log_probs'][:, :, None] + log_probs).reshape(batch_size, k * vocab_size)
    top_log_probs, top_indices = jax.lax.top_k(candidates, 2 * k)  # >= k of them do not end here.
    origins, new_tokens = top_indices // vocab_size, (top_indices % vocab_size).astype(jnp.int32)
    extended = jax.lax.dynamic_update_slice_in_dim(
        _gather_beams(s['live'], origins), new_tokens[:, :, None], i + 1, axis=2)
    ends = new_tokens == eos_id

    live_log_probs, live_picks = jax.lax.top_k(jnp.where(ends, NEG_INF, top_log_probs), k)
    live = _gather_beams(extended, live_picks)
    cache = _gather_cache_beams(cache, jnp.take_along_axis(origins, live_picks, axis=1))

    row_done = s['finished_flags'].all(axis=1, keepdims=True)  # Done rows take no new ends.
    ends_in_beam = ends & (jnp.arange(2 * k) < k) & ~row_done
    scores = jnp.where(ends_in_beam, top_log_probs / length_penalty((i + 1).astype(jnp.float32), alpha), NEG_INF)
    pool_scores = jnp.concatenate([s['finished_scores'], scores], axis=1)
    pool = jnp.concatenate([s['finished'], extended], axis=1)
    pool_flags = jnp.concatenate([s['finished_flags'], ends_in_beam], axis=1)
    finished_scores, finished_picks = jax.lax.top_k(pool_scores, k)
    return dict(i=i + 1, live=live, live_log_probs=live_log_probs, finished=_gather_beams(pool, finished_picks),
                finished_scores=finished_scores, finished_flags=_gather_beams(pool_flags, finished_picks),
                cache=cache)

  s = jax.lax.while_loop(not_done, step, state)
  best = jnp.where(s['finished_flags'][:, :1], s['finished'][:, 0], s['live'][:, 0])
  return best[:, 1:]


def sample_logits(rng: Array, logits: Array, *, temperature: float, top_k: int) -> Array:
  """One id per row of `logits` [rows, vocab]: drawn from softmax(logits / temperature) over the `top_k` most
  likely ids (0: all of them); temperature 0 takes the most likely."""
  if temperature == 0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  logits = logits.astype(jnp.float32) / temperature
  if 0 < top_k < logits.shape[-1]:
    kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
    logits = jnp.where(logits < kth, -jnp.inf, logits)
  return jax.random.categorical(rng, logits, axis=-1).astype(jnp.int32)


def sample(step_fn: StepFn, cache: Cache, tokens: Array, *, prompt_length: int, rng: Array, temperature: float,
           top_k: int) -> Array:
  """`tokens` [batch, length] with every position from `prompt_length` on drawn (`sample_logits`), each from the
  logits of the tokens before it; the first `prompt_length` are read as they are, through the cache."""
  length = tokens.shape[1]

  def step(carry, t):
    tokens, cache = carry
    logits, cache = step_fn(jax.lax.dynamic_slice_in_dim(tokens, t, 1, axis=1), cache)
    drawn = sample_logits(jax.random.fold_in(rng, t), logits, temperature=temperature, top_k=top_k)
    following = jnp.where(t + 1 < prompt_length, jax.lax.dynamic_index_in_dim(tokens, t + 1, 1, keepdims=False),
                          drawn)
    return (jax.lax.dynamic_update_slice_in_dim(tokens, following[:, None], t + 1, axis=1), cache), None

  (tokens, _), _ = jax.lax.scan(step, (tokens, cache), jnp.arange(length - 1))
  return tokens
