"""Scores a ListOps run's best checkpoint on any LRA-format file: overall, by depth and by length.

    python -m lra_posenc.listops.evaluate --workdir=runs/listops_cpu --data=FILE.tsv [--split_name=NAME]

FILE holds `Source<TAB>Target` rows: our generator's, LRA's release, or another's. A bad
row stops the command with its file and line, as in training (`--on_invalid=skip` counts
such rows instead). Writes WORKDIR/evaluations/NAME.json (accuracy, loss, the file's
majority class, counts, and accuracy by nesting depth and by length bucket) and NAME.png,
and prints the tables. NAME defaults to the file's name without its extension.
Expressions longer than the run's data.max_length need --max_length; an encoding that
cannot read positions beyond its training length says so.
"""
import os
from collections.abc import Sequence

import jax
import matplotlib
import numpy as np
from absl import flags

from lra_posenc.listops import input_pipeline
from lra_posenc.listops.settings import CONFIG_HISTORY, read_scoring_settings
from lra_posenc.listops.train import example_outcomes
from lra_posenc.models.classifier import TransformerClassifier
from lra_posenc.plots import save_line_plot
from lra_posenc.training import cli
from lra_posenc.training.batches import ArrayDataset
from lra_posenc.training.checkpointing import restore_best
from lra_posenc.training.run_files import quiet_checkpoint_logs, write_json
from lra_posenc.training.task import Params

matplotlib.use('Agg')  # Files only; no display.
import matplotlib.pyplot as plt  # noqa: E402

EVALUATIONS_DIR = 'evaluations'


def length_bucket_edges(lengths: np.ndarray, buckets: int) -> list[int]:
  """Edges [e0, e1, ..., en] (each bucket [e_i, e_(i+1))) splitting `lengths` into about equal counts."""
  starts = np.unique(np.quantile(lengths, np.linspace(0, 1, buckets + 1)[:-1], method='nearest').astype(int))
  return starts.tolist() + [int(lengths.max()) + 1]


def example_scores(model: TransformerClassifier, params: Params, dataset: ArrayDataset, batch_size: int
                   ) -> tuple[np.ndarray, np.ndarray]:
  """Each example's cross-entropy and whether the model's most probable class is its label, in file order: the
  one loop every ListOps score of a checkpoint comes from."""
  outcomes = jax.jit(lambda params, batch: example_outcomes(model, params, batch, None))
  nll, correct = [], []
  for batch in dataset.eval_batches(batch_size):
    real = batch['weight'] > 0
    batch_nll, batch_correct = jax.device_get(outcomes(params, batch))
    nll.append(batch_nll[real])
    correct.append(batch_correct[real])
  return np.concatenate(nll), np.concatenate(correct)


def breakdown(groups: np.ndarray, labels: Sequence[str], correct: np.ndarray, nll: np.ndarray,
              targets: np.ndarray) -> dict[str, dict]:
  """Per group index i (`groups` == i, named `labels[i]`): examples, accuracy, mean loss and the accuracy of
  the group's own majority class (label frequencies change with depth and length); empty groups left out."""
  rows = {}
  for index, label in enumerate(labels):
    members = groups == index
    if members.any():
      rows[label] = {'examples': int(members.sum()), 'accuracy': float(correct[members].mean()),
                     'loss': float(nll[members].mean()),
                     'majority_class_accuracy': float(np.bincount(targets[members]).max() / members.sum())}
  return rows


def evaluate_file(workdir: str, path: str, *, split_name: str | None = None, on_invalid: str | None = None,
                  max_length: int | None = None, length_buckets: int = 5) -> dict:
  """Scores the best checkpoint of `workdir` on `path`; writes and returns the report (see the module doc)."""
  if length_buckets < 1:
    raise ValueError(f'--length_buckets={length_buckets} must be at least 1')
  config, params, step = restore_best(workdir, CONFIG_HISTORY)
  run = read_scoring_settings(config)
  model, data = run.model, run.data
  dataset, read_report = input_pipeline.read_split(
      path, max_length=max_length or data.max_length, num_classes=data.num_classes,
      on_invalid=on_invalid or data.on_invalid, skip_option='--on_invalid=skip')
  # Padded to the longest expression present, not to max_length: an encoding bound to its training
  # length reads a file of shorter expressions whatever --max_length says.
  longest = int(input_pipeline.expression_lengths(dataset.arrays['inputs']).max())
  dataset = ArrayDataset(dataset.arrays | {'inputs': dataset.arrays['inputs'][:, :longest]})
  nll, correct = example_scores(model, params, dataset, run.batch_size)
  inputs, targets = dataset.arrays['inputs'], dataset.arrays['targets']
  depths = input_pipeline.expression_depths(inputs)
  lengths = input_pipeline.expression_lengths(inputs)
  edges = length_bucket_edges(lengths, length_buckets)
  label_counts = np.bincount(targets, minlength=data.num_classes)
  report = {
      'workdir': os.path.abspath(workdir), 'file': os.path.abspath(path), 'best_step': step,
      'examples': read_report.examples, 'skipped': read_report.skipped,
      'accuracy': float(correct.mean()), 'loss': float(nll.mean()),
      'majority_class': int(label_counts.argmax()),
      'majority_class_accuracy': float(label_counts.max() / len(targets)),
      'label_counts': label_counts.tolist(),
      'by_depth': breakdown(depths, [str(d) for d in range(depths.max() + 1)], correct, nll, targets),
      'by_length': breakdown(np.searchsorted(edges, lengths, side='right') - 1,
                             [f'{low}-{high - 1}' for low, high in zip(edges[:-1], edges[1:])], correct, nll,
                             targets),
  }
  name = split_name or os.path.splitext(os.path.basename(path))[0]
  output_dir = os.path.join(workdir, EVALUATIONS_DIR)
  os.makedirs(output_dir, exist_ok=True)
  write_json(os.path.join(output_dir, f'{name}.json'), report)
  plot_breakdown(report, os.path.join(output_dir, f'{name}.png'), title=f'{os.path.basename(path)}, '
                 f'{os.path.basename(os.path.normpath(workdir))} (step {step})')
  return report


def plot_breakdown(report: dict, path: str, title: str) -> None:
  """Accuracy by depth and by length bucket, side by side, each group with its majority class."""
  figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
  for axis, key, label in ((axes[0], 'by_depth', 'nesting depth'), (axes[1], 'by_length', 'length (tokens)')):
    groups = report[key]
    axis.plot(range(len(groups)), [g['accuracy'] for g in groups.values()], marker='o', label='accuracy')
    axis.plot(range(len(groups)), [g['majority_class_accuracy'] for g in groups.values()], 'k--',
              label="the group's majority class")
    axis.set_xticks(range(len(groups)), [f"{label}\nn={g['examples']}" for label, g in groups.items()])
    axis.set(xlabel=label, ylim=(0, 1))
  axes[0].set_ylabel('accuracy')
  axes[0].grid(alpha=0.3)
  figure.suptitle(title)
  save_line_plot(figure, axes[1], path)


def format_report(report: dict) -> str:
  lines = [f"{report['file']}: {report['examples']} examples"
           + (f", skipped {report['skipped']}" if report['skipped'] else '')
           + f"; best checkpoint (step {report['best_step']}) accuracy {report['accuracy']:.4f}, loss "
           f"{report['loss']:.4f}; majority class {report['majority_class']}: {report['majority_class_accuracy']:.4f}"]
  for key, heading in (('by_depth', 'depth'), ('by_length', 'length')):
    lines += ['', f'| {heading} | examples | accuracy | loss | majority class |', '| --- | --- | --- | --- | --- |']
    lines += [f"| {label} | {g['examples']} | {g['accuracy']:.4f} | {g['loss']:.4f} | "
              f"{g['majority_class_accuracy']:.4f} |" for label, g in report[key].items()]
  return '\n'.join(lines)


def main(argv: Sequence[str]) -> None:
  del argv
  quiet_checkpoint_logs()
  options = flags.FLAGS
  report = evaluate_file(options.workdir, options.data, split_name=options.split_name, on_invalid=options.on_invalid,
                         max_length=options.max_length, length_buckets=options.length_buckets)
  print(format_report(report))


if __name__ == '__main__':
  flags.DEFINE_string('workdir', None, 'A workdir written by lra_posenc.listops.train.')
  flags.DEFINE_string('data', None, 'An LRA-format ListOps file (Source<TAB>Target rows).')
  flags.DEFINE_string('split_name', None, "The report's name in WORKDIR/evaluations (default: the file's stem).")
  flags.DEFINE_enum('on_invalid', None, list(input_pipeline.INVALID_ROW_POLICIES),
                    "Bad rows: 'raise' (stop at the first, with its line) or 'skip' (count them); default: the run's.")
  flags.DEFINE_integer('max_length', None, "Longest expression read, in tokens (default: the run's data.max_length).")
  flags.DEFINE_integer('length_buckets', 5, 'Length buckets of about equal counts for the breakdown.')
  flags.mark_flags_as_required(['workdir', 'data'])
  cli.run(main)
