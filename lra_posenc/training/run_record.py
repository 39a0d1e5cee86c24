"""What a run carries from checkpoint to checkpoint besides its state: a typed record, saved as JSON."""
import dataclasses
from typing import Any



@dataclasses.dataclass(frozen=True)
class BestEvaluation:
  """The evaluation with the highest selection metric so far."""
  step: int
  score: float
  validation: dict[str, float]


@dataclasses.dataclass(frozen=True)
class RunSpan:
  """One invocation's steps and host time; `compile_seconds` is None for spans recorded before it was."""
  first_step: int
  last_step: int
  train_seconds: float
  compile_seconds: float | None = None

  def to_json(self) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True)
class RunRecord:
  """The dropout PRNG key, the model and task artifacts a checkpoint is only valid with, the best evaluation,
  the evaluations since it (early stopping) and the earlier invocations' spans.

  A checkpoint saves `to_json()`, which `from_json` reads back.
  """
  rng: list[int]
  model: dict[str, Any]
  artifacts: dict[str, Any]
  best: BestEvaluation | None = None
  evaluations_since_best: int = 0
  runs: tuple[RunSpan, ...] = ()

  def to_json(self) -> dict[str, Any]:
    return {'rng': self.rng, 'model': self.model, 'artifacts': self.artifacts,
            'best': None if self.best is None else dataclasses.asdict(self.best),
            'evaluations_since_best': self.evaluations_since_best, 'runs': [run.to_json() for run in self.runs]}

  @classmethod
  def from_json(cls, saved: dict[str, Any]) -> 'RunRecord':
    return cls(rng=saved['rng'], model=saved['model'], artifacts=saved['artifacts'],
               best=None if saved['best'] is None else BestEvaluation(**saved['best']),
               evaluations_since_best=saved['evaluations_since_best'],
               runs=tuple(RunSpan(**run) for run in saved['runs']))

  def out_of_patience(self, patience: int) -> bool:
    """Whether `patience` evaluations in a row (0: never) missed the best: read from the record, so a resumed
    run agrees, as does every host."""
    return bool(patience) and self.evaluations_since_best >= patience

  def after_evaluation(self, step: int, scores: dict[str, float], selection_metric: str) -> 'RunRecord':
    """The record once the evaluation at `step` is counted: its new best, or one more evaluation since it."""
    if self.best is None or scores[selection_metric] > self.best.score:
      return dataclasses.replace(self, best=BestEvaluation(step, scores[selection_metric], scores),
                                 evaluations_since_best=0)
    return dataclasses.replace(self, evaluations_since_best=self.evaluations_since_best + 1)

  def with_run(self, run: RunSpan) -> 'RunRecord':
    return dataclasses.replace(self, runs=self.runs + (run,))


def check_resumable(expected: RunRecord, selection_metric: str, step: int, saved: dict[str, Any]) -> None:
  """Refuses a checkpoint's record made for another model, with other task artifacts (a vocabulary), from
  another seed (its dropout key would go on beside the new seed's batch order), or whose best evaluation was
  chosen by another metric than `selection_metric` (the next evaluations' scores would be compared with it)."""
  if saved['rng'] != expected.rng:
    raise ValueError(f'checkpoint at step {step} was trained with another config.seed (its dropout key differs); '
                     'a new seed needs a new --workdir, this one resumes only the seed it was started with')
  if saved['artifacts'] != expected.artifacts:
    raise ValueError(f'checkpoint at step {step} was trained with different task artifacts '
                     f'({sorted(saved["artifacts"])}); refusing to resume with a different vocabulary')
  saved_model = saved['model']
  differing = sorted(k for k in set(saved_model) | set(expected.model) if saved_model.get(k) != expected.model.get(k))
  if differing:
    raise ValueError(f'checkpoint at step {step} has a different model config; differing keys: '
                     + ', '.join(f'model.{k} ({saved_model.get(k)!r} -> {expected.model.get(k)!r})'
                                 for k in differing)
                     + '. A new model needs a new --workdir; this one resumes only the model it holds')
  best = saved['best']
  if best is not None and best['validation'].get(selection_metric) != best['score']:
    chosen_by = next((name for name, score in best['validation'].items() if score == best['score']), 'another metric')
    raise ValueError(f'checkpoint at step {step} chose its best evaluation (step {best["step"]}) by validation '
                     f'{chosen_by}, but evaluation.selection_metric={selection_metric!r}: its scores would be '
                     f'compared with that best; resume with evaluation.selection_metric={chosen_by!r}, or start a '
                     'new --workdir')
