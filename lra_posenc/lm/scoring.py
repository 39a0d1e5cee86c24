"""A language model scored at and past its training length (Press et al. 2022's protocol).

Each split is scored in windows of every length asked for (multiples of the training window): non-overlapping,
or sliding by a stride with each window scoring only its last `stride` targets (the first scores all), so every
target is scored once. Beside the loss and bits per token of each length, the loss by position inside the window
shows where an encoding breaks. An encoding that cannot represent a length (a learned table) is "not measured",
with its reason. Options that stretch a trained model's positions zero-shot (RoPE's `interpolation_factor`,
`ntk_factor`), where the encoding has them, are also scored set to the length's ratio to the training window.

A model trained on randomized positions (Ruoss et al. 2023) is scored as their code scores it: each batch at
sorted positions drawn from [0, L) as in training, the loss averaged over `position_draws` draws of the whole
split (draw d of batch b from key(d) folded with b); it is also scored at 0 ... length - 1 ('by_length_sequential',
the protocol before), so both are reported. A model trained with passkeys is also scored on them (lm/passkey.py).
"""
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from lra_posenc import encodings, progress
from lra_posenc.lm import passkey
from lra_posenc.lm.input_pipeline import TokenSplit
from lra_posenc.models.language_model import LanguageModel, weighted_nll
from lra_posenc.training.distributed import AXIS, host_copy, shard
from lra_posenc.training.trainer import sum_over_devices

# results.json's key of a split's scores by window length; 'by_length_OPTION' with an option stretched.
BY_LENGTH = 'by_length'
# The suffix of the scores of a model with randomized positions read at 0 ... length - 1.
SEQUENTIAL = 'sequential'
PASSKEY = 'passkey'  # results.json's key of a split's passkey scores by window length.

POSITION_BINS = 32  # The loss by position is reported as the mean over this many equal spans of the window.


def position_sums(model: LanguageModel, params: Any, batch: dict[str, jax.Array], rng: jax.Array | None = None
                  ) -> dict[str, jax.Array]:
  """Summed negative log-likelihood and weight of the targets at each window position [length], over every
  device's rows; with `rng`, a model with randomized positions reads positions drawn from it."""
  rngs = {} if rng is None else {'positions': rng}
  logits = model.apply({'params': params}, batch['inputs'], train=False, rngs=rngs)
  weight = batch['mask'] * batch['weight'][:, None]
  return sum_over_devices({'nll': weighted_nll(logits, batch['targets'], weight).sum(0), 'count': weight.sum(0)})


def scaled(model: LanguageModel, option: str, factor: float) -> LanguageModel:
  """`model` with its encoding's `option` set to `factor` (a zero-shot stretch of its positions)."""
  cfg = model.config
  options = dataclasses.replace(cfg.pos_encoding_options, **{option: factor})
  return model.clone(config=dataclasses.replace(cfg, pos_encoding_options=options))


def stretch_options(model: LanguageModel, names: tuple[str, ...]) -> tuple[str, ...]:
  """Which of the option `names` the model's encoding has."""
  fields = {field.name for field in dataclasses.fields(model.config.pos_encoding_options)}
  return tuple(name for name in names if name in fields)


@dataclasses.dataclass
class LengthScorer:
  """Scores parameters (replicated over the local devices) on a split at each length; compiles each model and
  length once."""
  model: LanguageModel
  block_size: int
  length_multiples: tuple[int, ...]
  sliding_stride: int
  batch_size: int  # Windows of `block_size` per batch: longer windows take as many tokens.
  stretch: tuple[str, ...]
  drawn_positions: bool = True  # A model with randomized positions read at drawn positions (and sequential ones).
  position_draws: int = 1  # Draws of positions averaged.
  passkey_scorer: passkey.PasskeyScorer | None = None  # A model trained with passkeys: also scored on them.
  _steps: dict = dataclasses.field(default_factory=dict)

  def _step(self, model: LanguageModel, drawn: bool) -> Callable:
    if (model, drawn) not in self._steps:
      self._steps[model, drawn] = jax.pmap(functools.partial(position_sums, model), axis_name=AXIS,
                                           in_axes=(0, 0, None) if drawn else (0, 0))
    return self._steps[model, drawn]

  def windows_per_batch(self, length: int) -> int:
    """As many tokens as `batch_size` windows of the training length, in a multiple of the devices."""
    devices = jax.device_count()
    return max(devices, self.batch_size * self.block_size // length // devices * devices)

  def score_length(self, model: LanguageModel, params: Any, split: TokenSplit, length: int, what: str, *,
                   drawn: bool = False) -> dict[str, Any]:
    """Loss and bits per token of `split` in windows of `length`, the loss by position, and the tokens scored;
    or why the model cannot be scored there. `drawn`: each batch at randomized positions, the sums over
    `position_draws` passes over the split (a loss averaged over the draws; 'position_draws' records them)."""
    stride = min(self.sliding_stride, length) if self.sliding_stride else length
    step = self._step(model, drawn)
    draws = self.position_draws if drawn else 1
    totals = None
    try:
      for draw in range(draws):
        batches = split.scoring_windows(length, stride).eval_batches(self.windows_per_batch(length))
        label = f'{what}, positions draw {draw + 1} of {self.position_draws}' if drawn else what
        for index, batch in enumerate(progress.track(batches, label, unit='batches')):
          inputs = (params, shard(batch)) + ((jax.random.fold_in(jax.random.key(draw), index),) if drawn else ())
          sums = host_copy(step(*inputs))
          totals = sums if totals is None else jax.tree.map(np.add, totals, sums)
    except encodings.CannotExtrapolate as error:
      return {'not_measured': str(error)}
    nll, count = totals['nll'].astype(np.float64), totals['count'].astype(np.float64)
    loss = float(nll.sum() / count.sum())
    bins = np.array_split(np.arange(length), min(POSITION_BINS, length))
    return {'loss': loss, 'bits_per_token': loss / math.log(2), 'tokens': int(count.sum()) // draws,
            'loss_by_position': [float(nll[b].sum() / max(count[b].sum(), 1)) for b in bins],
            'position_bin_starts': [int(b[0]) for b in bins]} | ({'position_draws': draws} if drawn else {})

  def score(self, params: Any, split: TokenSplit, what: str) -> dict[str, Any]:
    """Every length's scores, as results.json keeps them: 'by_length' maps a window length to its scores, and
    'by_length_OPTION' the same with the encoding's OPTION set to the length's ratio to the training window. A
    model with randomized positions: 'by_length' averages the position draws, 'by_length_sequential' reads
    0 ... length - 1."""
    lengths = [self.block_size * multiple for multiple in self.length_multiples]
    drawn = bool(self.model.randomized_positions) and self.drawn_positions
    scores = {BY_LENGTH: {str(length): self.score_length(self.model, params, split, length,
                                                         f'{what}, windows of {length}', drawn=drawn)
                          for length in lengths}}
    if drawn:
      scores[f'{BY_LENGTH}_{SEQUENTIAL}'] = {
          str(length): self.score_length(self.model, params, split, length,
                                         f'{what}, windows of {length} at positions 0 ... {length - 1}')
          for length in lengths}
    if self.passkey_scorer:  # Also in the training window, which tells whether the model retrieves at all.
      scores[PASSKEY] = {str(length): self.passkey_scorer.score_length(
          params, split, length, self.windows_per_batch(length), f'{what}, passkeys in windows of {length}',
          block_size=self.block_size, drawn=drawn) for length in sorted({self.block_size, *lengths})}
    for option in self.stretch:
      scores[f'{BY_LENGTH}_{option}'] = {
          str(length): self.score_length(scaled(self.model, option, length / self.block_size), params, split,
                                         length, f'{what}, windows of {length}, {option}={length // self.block_size}')
          for length in lengths if length > self.block_size}
    return scores


def recorded_columns(results: dict) -> dict[str, float | None]:
  """A run's scores by length (results.json) as figures of its row: 'SPLIT loss at LENGTH', and 'SPLIT loss at
  LENGTH OPTION' where the encoding's OPTION was stretched to the length; None where the encoding could not be
  measured at that length. For the model's own scores past the training window L, also the two figures of
  `extrapolation`: 'SPLIT extrapolation at LENGTH' and 'SPLIT far-context gain at LENGTH'; with passkeys, their
  accuracies (`passkey.recorded_columns`)."""
  columns = {}
  block_size = results['config']['data']['block_size']
  for split, scores in results['test_sets'].items():
    for option, by_length in length_score_sets(scores):
      for length, score in by_length.items():
        columns[f'{split} loss at {length}' + (f' {option}' if option else '')] = score.get('loss')
    for length, figures in extrapolation(scores[BY_LENGTH], block_size).items():
      columns |= {f'{split} {name} at {length}': value for name, value in figures.items()}
    if PASSKEY in scores:
      columns |= passkey.recorded_columns(split, scores[PASSKEY], block_size)
  return columns


def extrapolation(by_length: dict, block_size: int) -> dict[int, dict[str, float | None]]:
  """For each scored length kL past the training window L (windows of L scored too), stated before any run:
  'extrapolation', loss(kL) - loss(L), how much the loss moves when windows grow k-fold; and 'far-context gain',
  the mean loss by position over the bins at or past L inside kL windows minus that over the bins of positions
  L/2 ... L - 1 inside L windows (bins of equal size, so nearly equal counts): below 0 where tokens that only
  the longer window holds, more than L back, lower the loss, which a model that merely tolerates long inputs does
  not. None where either length was not measured."""
  own = by_length.get(str(block_size), {})
  figures = {}
  for length in sorted(int(key) for key in by_length):
    if length <= block_size:
      continue
    score = by_length[str(length)]
    if 'loss' not in own or 'loss' not in score:
      figures[length] = {'extrapolation': None, 'far-context gain': None}
      continue
    far = [loss for start, loss in zip(score['position_bin_starts'], score['loss_by_position']) if start >= block_size]
    near = [loss for start, loss in zip(own['position_bin_starts'], own['loss_by_position'])
            if start >= block_size // 2]
    figures[length] = {'extrapolation': score['loss'] - own['loss'],
                       'far-context gain': float(np.mean(far) - np.mean(near))}
  return figures


def length_score_sets(scores: dict) -> Iterator[tuple[str | None, dict]]:
  """The scores by length in one split's results (as `LengthScorer.score` writes them): (None, the model's own)
  and (OPTION, the model with OPTION stretched) for each stretched option."""
  for key, by_length in scores.items():
    if key == BY_LENGTH:
      yield None, by_length
    elif key.startswith(f'{BY_LENGTH}_'):
      yield key.removeprefix(f'{BY_LENGTH}_'), by_length
