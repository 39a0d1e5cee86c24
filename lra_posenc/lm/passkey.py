"""Passkey retrieval (Mohtashami & Jaggi 2023): a key hidden in the text, asked for at the end of the window.

A needle is a marker token and `length` key symbols, put at some depth of a window of text; the query, ending the
window, is the same marker and the same key, as their prompt has "The pass key is" before the key in both places:
retrieval is copying what followed the marker's first occurrence. The marker and the key's symbols are ids of their
own after the vocabulary's, so any corpus can carry them and none of its text reads as one. A stated fraction of the
training windows carry a needle and a query (the others are plain text), and the loss stays the language model's
over every target: the model learns retrieval only because the query's key can be predicted from the needle.

Scoring cuts windows of each length from the scored split, the same windows and keys for every model, and plants a
needle at each of `depths` evenly spaced depths (0: the window's first token, farthest from the query; 1: just
before the query) in `trials` windows each. The key's symbols are read by argmax under teacher forcing; when all are
right, that is what greedy decoding writes, so this exact match is greedy decoding's. A needle's distance is the
tokens from its marker to the query's: a window of L tokens holds distances below L, so a distance of L or more
was never seen in training.
"""
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from lra_posenc import encodings, progress
from lra_posenc.lm.input_pipeline import TokenSplit
from lra_posenc.models.language_model import LanguageModel
from lra_posenc.training.batches import ArrayDataset
from lra_posenc.training.distributed import AXIS, host_copy, shard
from lra_posenc.training.trainer import sum_over_devices

SYMBOLS = 10  # A key's symbols: ten ids of their own, as a key of digits.
# The accuracy, within the training window, below which a model did not learn retrieval: its scores past the window
# are then not retrieval failures and are left out of every mean (stated before any run).
LEARNED_ACCURACY = 0.5
SCORING_STREAM = 0x9A55  # Seeds the scoring windows with their length: the same for every model and seed.


def depth_fractions(depths: int) -> np.ndarray:
  """`depths` evenly spaced depths from the window's start (0) to just before the query (1); one: 1."""
  return np.linspace(0, 1, depths) if depths > 1 else np.ones(1)


@dataclasses.dataclass(frozen=True)
class Passkey:
  """A needle and a query of `length` key symbols, with ids from `first_id` (the vocabulary's size) on."""
  first_id: int
  length: int

  @property
  def num_ids(self) -> int:
    """The ids passkeys add to the vocabulary's: the marker (`first_id`) and the symbols after it."""
    return 1 + SYMBOLS

  @property
  def span(self) -> int:
    """Tokens of a needle, and of a query: a marker and the key."""
    return 1 + self.length

  def last_start(self, tokens: int) -> int:
    """The last position a needle can start at in a window of `tokens` (inputs and the next token) whose last
    `span` tokens are the query."""
    return tokens - 2 * self.span

  def plant(self, windows: np.ndarray, starts: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """`windows` [rows, tokens] with a needle starting at `starts` [rows] and the query ending each row, both of
    `keys` [rows, length] (symbols 0 ... SYMBOLS - 1)."""
    if np.any(starts < 0) or np.any(starts > self.last_start(windows.shape[1])):
      raise ValueError(f'needle starts {starts} outside [0, {self.last_start(windows.shape[1])}]')
    rows = len(windows)
    needle = np.concatenate([np.full((rows, 1), self.first_id, windows.dtype), self.first_id + 1 + keys], axis=1)
    planted = windows.copy()
    planted[np.arange(rows)[:, None], starts[:, None] + np.arange(self.span)] = needle
    planted[:, -self.span:] = needle
    return planted

  def carry(self, windows: np.ndarray, rng: np.random.Generator, *, fraction: float) -> np.ndarray:
    """A training batch's `windows` [batch, tokens], each carrying a needle and a query with probability
    `fraction`, at a uniform depth, with a uniform key."""
    rows, tokens = windows.shape
    carries = rng.random(rows) < fraction
    starts = rng.integers(0, self.last_start(tokens) + 1, rows)
    keys = rng.integers(0, SYMBOLS, (rows, self.length))
    return np.where(carries[:, None], self.plant(windows, starts, keys), windows)

  def haystacks(self, split: TokenSplit, length: int, depths: int, trials: int) -> tuple[ArrayDataset, np.ndarray]:
    """Scoring windows of `length` inputs cut from `split`: `trials` for each of `depths` evenly spaced depths, as
    an ArrayDataset (inputs, targets, and each window's depth index 'cell'), and each window's distance."""
    tokens = length + 1
    split.check_length(tokens, f'passkey windows of {length} tokens and the next')
    ids = split.ids
    rng = np.random.default_rng([length, SCORING_STREAM])
    offsets = rng.integers(0, len(ids) - length, depths * trials)
    keys = rng.integers(0, SYMBOLS, (depths * trials, self.length))
    cell = np.repeat(np.arange(depths), trials)
    starts = np.round(depth_fractions(depths)[cell] * self.last_start(tokens)).astype(np.int64)
    windows = self.plant(ids[offsets[:, None] + np.arange(tokens)], starts, keys)
    return (ArrayDataset({'inputs': windows[:, :-1], 'targets': windows[:, 1:], 'cell': cell.astype(np.int32)}),
            (tokens - self.span) - starts)


def cell_hits(model: LanguageModel, length: int, cells: int, params: Any, batch: dict[str, jax.Array],
              rng: jax.Array | None = None) -> dict[str, jax.Array]:
  """Exact matches and windows [cells] by depth, over every device's rows: a window matches when the argmax at
  each of the query's key positions (the last `length` targets) is the key's symbol."""
  rngs = {} if rng is None else {'positions': rng}
  logits = model.apply({'params': params}, batch['inputs'], train=False, rngs=rngs)
  hits = (logits[:, -length:].argmax(-1) == batch['targets'][:, -length:]).all(-1)
  rows = jax.nn.one_hot(batch['cell'], cells) * batch['weight'][:, None]
  return sum_over_devices({'hits': (rows * hits[:, None]).sum(0), 'windows': rows.sum(0)})


@dataclasses.dataclass
class PasskeyScorer:
  """Scores parameters (replicated over the local devices) on passkeys hidden in a split, at each length."""
  model: LanguageModel
  passkey: Passkey
  depths: int
  trials: int
  _steps: dict = dataclasses.field(default_factory=dict)

  def _step(self, drawn: bool) -> Callable:
    if drawn not in self._steps:
      self._steps[drawn] = jax.pmap(functools.partial(cell_hits, self.model, self.passkey.length, self.depths),
                                    axis_name=AXIS, in_axes=(0, 0, None) if drawn else (0, 0))
    return self._steps[drawn]

  def score_length(self, params: Any, split: TokenSplit, length: int, windows_per_batch: int, what: str, *,
                   block_size: int, drawn: bool = False) -> dict[str, Any]:
    """Accuracy at `length`, overall and by depth (with each depth's distances), and over the needles at a
    distance of `block_size` or more; or why the model cannot be scored there. `drawn`: randomized positions
    read at sorted draws, one per batch (recorded as 'positions')."""
    dataset, distance = self.passkey.haystacks(split, length, self.depths, self.trials)
    totals = None
    try:
      for index, batch in enumerate(progress.track(dataset.eval_batches(windows_per_batch), what, unit='batches')):
        inputs = (params, shard(batch)) + ((jax.random.fold_in(jax.random.key(0), index),) if drawn else ())
        sums = host_copy(self._step(drawn)(*inputs))
        totals = sums if totals is None else jax.tree.map(np.add, totals, sums)
    except encodings.CannotExtrapolate as error:
      return {'not_measured': str(error)}
    hits, windows = totals['hits'].astype(np.int64), totals['windows'].astype(np.int64)
    distances = distance[::self.trials]  # A depth's windows share its distance.
    far = distances >= block_size
    return ({'positions': 'drawn'} if drawn else {}) | {
        'accuracy': float(hits.sum() / windows.sum()), 'windows': int(windows.sum()),
        'by_depth': [{'depth': float(fraction), 'distance': int(d), 'accuracy': float(h / w)}
                     for fraction, d, h, w in zip(depth_fractions(self.depths), distances, hits, windows)],
        'beyond_window': ({'accuracy': float(hits[far].sum() / windows[far].sum()),
                           'windows': int(windows[far].sum())} if far.any() else None)}


def retrieves(passkey: dict, block_size: int) -> bool:
  """Whether a model learned retrieval: its passkey scores (results.json) reach LEARNED_ACCURACY in its own window."""
  own = passkey.get(str(block_size), {}).get('accuracy')
  return own is not None and own >= LEARNED_ACCURACY


def recorded_columns(split: str, passkey: dict, block_size: int) -> dict[str, float | None]:
  """A split's passkey scores (results.json) as figures of its run: 'SPLIT passkey at LENGTH', the accuracy over
  every depth, and 'SPLIT passkey beyond the window', over every needle at a distance of the training window or
  more at every length; all None where the model did not learn retrieval (accuracy below LEARNED_ACCURACY in its
  own window), so that a mean over seeds counts only models that retrieve, and the rest are named."""
  own = passkey.get(str(block_size), {}).get('accuracy')
  learned = retrieves(passkey, block_size)
  columns = {f'{split} passkey at {length}': score.get('accuracy') if learned else None
             for length, score in passkey.items()}
  beyond = [score['beyond_window'] for score in passkey.values() if score.get('beyond_window')]
  columns[f'{split} passkey beyond the window'] = (
      sum(b['accuracy'] * b['windows'] for b in beyond) / sum(b['windows'] for b in beyond)
      if learned and beyond else None)
  columns[f'{split} passkey learned'] = None if own is None else float(learned)
  return columns
