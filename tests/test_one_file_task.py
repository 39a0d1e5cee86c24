"""A task in one file: which token came first? Its data, settings, model, config (`get_config`), training program
(`python -m test_one_file_task`) and `SPEC` are all here, and nothing else in the project names it. It trains
through the real trainer in a sweep, and the summary's table code reads its runs from a study file: proof that a
new task is one folder (here, one file) and no edit elsewhere.

A bag of tokens does not say which came first, so the task needs positions: with `pooling='mean'` and no
encoding the classifier sees only the bag.
"""
import dataclasses
import functools
import json
import os
import subprocess

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from lra_posenc import encodings, tasks
from lra_posenc.models.classifier import TransformerClassifier
from lra_posenc.models.transformer import CONFIG_KEYS, config_keys, transformer_config
from lra_posenc.studies import report, sweep
from lra_posenc.tasks import TaskSpec
from lra_posenc.training import cli
from lra_posenc.training.batches import ArrayDataset
from lra_posenc.training.settings import TrainerSettings, check_keys, read_trainer_settings
from lra_posenc.training.task import Task
from lra_posenc.validation import check_positive

NAME = 'test_one_file_task'  # A task outside the package is named by its module.
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS_DIR)
CLASSIFIER_KEYS = config_keys(TransformerClassifier)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The task's config (`--config=tests/test_one_file_task.py`): a one-layer classifier, a few steps."""
  del arg
  model = dict(emb_dim=16, num_heads=2, num_layers=1, qkv_dim=16, mlp_dim=32, dropout_rate=0.0,
               attention_dropout_rate=0.0, activation_dropout_rate=0.0, pos_encoding='sinusoidal',
               pos_encoding_options=encodings.options_config(), dtype='float32', attention_implementation='xla',
               remat=False, norm_position='pre', activation='gelu', pooling='mean', classifier_dim=16,
               pos_encoding_placement='input', randomized_positions=0, length_multiple=1)
  return ml_collections.ConfigDict(dict(
      task=NAME, seed=0, data=dict(length=8, vocab=5, examples=256), model=model,
      optimizer=dict(learning_rate=3e-3, min_learning_rate=0.0, schedule='constant', warmup_steps=0, b1=0.9,
                     b2=0.98, eps=1e-9, weight_decay=0.0, grad_clip_norm=1.0),
      training=dict(batch_size=32, num_train_steps=30, log_every_steps=10, patience=0),
      evaluation=dict(batch_size=64, every_steps=15, selection_metric='accuracy', average_last=0),
      checkpoint=dict(every_steps=15, max_to_keep=1)))


@dataclasses.dataclass(frozen=True)
class Settings:
  trainer: TrainerSettings
  length: int
  vocab: int
  examples: int
  model: TransformerClassifier


def read_settings(config: ml_collections.ConfigDict) -> Settings:
  trainer = read_trainer_settings(config, NAME)
  check_keys(config.data, 'data', ('length', 'vocab', 'examples'))
  check_positive(config.data, 'data', 'length', 'vocab', 'examples')
  check_keys(config.model, 'model', CONFIG_KEYS + CLASSIFIER_KEYS)
  model = TransformerClassifier(transformer_config(config.model, max_len=config.data.length),
                                vocab_size=config.data.vocab + 1, num_classes=config.data.vocab,
                                **{key: config.model[key] for key in CLASSIFIER_KEYS})
  return Settings(trainer, config.data.length, config.data.vocab, config.data.examples, model)


def split(settings: Settings, seed: int) -> ArrayDataset:
  """Tokens 1..vocab (0 pads); the label is the first token, as a class."""
  tokens = np.random.default_rng(seed).integers(1, settings.vocab + 1, (settings.examples, settings.length))
  return ArrayDataset({'inputs': tokens.astype(np.int32), 'targets': (tokens[:, 0] - 1).astype(np.int32)})


def metrics(model: TransformerClassifier, params, batch, rng) -> dict:
  logits = model.apply({'params': params}, batch['inputs'], train=rng is not None,
                       rngs={} if rng is None else {'dropout': rng})
  nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch['targets'][:, None], axis=-1)[:, 0]
  weight = batch['weight']
  return {'loss': (nll * weight).sum(), 'accuracy': ((logits.argmax(-1) == batch['targets']) * weight).sum(),
          'count': weight.sum()}


def create_task(config: ml_collections.ConfigDict, workdir: str) -> Task:
  del workdir  # The data are drawn, not read.
  settings = read_settings(config)
  splits = {name: split(settings, seed) for name, seed in (('train', 1), ('validation', 2), ('test', 3))}
  batch_size, eval_size = settings.trainer.training.batch_size, settings.trainer.evaluation.batch_size
  example = jnp.zeros((1, settings.length), jnp.int32)
  return Task(init_params=lambda rng: settings.model.init({'params': rng}, example, train=False)['params'],
              metrics=functools.partial(metrics, settings.model),
              train_batches=lambda start: splits['train'].train_batches(batch_size, seed=settings.trainer.seed,
                                                                        start=start),
              eval_batches=lambda name: splits[name].eval_batches(eval_size), artifacts={},
              baselines={'chance': 1 / settings.vocab}, settings=settings.trainer)


# What the studies find by this module's name (`lra_posenc.tasks.find`); its training program is this file.
SPEC = TaskSpec(NAME, NAME, create_task, read_settings, test_metrics=('accuracy',), validation_metric='accuracy',
                validation_label='validation accuracy', default_target=0.5)

if __name__ == '__main__':
  cli.run_training(create_task, 'tests/test_one_file_task.py')


def test_the_task_trains_in_a_sweep_and_the_summary_reads_it_from_a_study_file(tmp_path, monkeypatch):
  # The sweep's processes import the task from this folder, as a researcher's would from theirs.
  monkeypatch.setenv('PYTHONPATH', os.pathsep.join([TESTS_DIR, os.environ.get('PYTHONPATH', '')]))
  runs = tmp_path / 'results' / 'first_token' / 'runs'
  sweep.main([f'--task={NAME}', f'--config={os.path.join(TESTS_DIR, "test_one_file_task.py")}', '--seeds=0',
              '--variants=none,sinusoidal', f'--output_dir={runs}'])
  accuracies = {}
  for encoding in ('none', 'sinusoidal'):
    with open(runs / encoding / 'seed_0' / 'results.json') as f:
      results = json.load(f)
    assert results['step'] == 30 and results['config']['task'] == NAME
    accuracies[encoding] = [results['test']['accuracy']]
  with open(tmp_path / 'results' / 'first_token' / 'study.toml', 'w') as f:
    f.write(f'task = "{NAME}"\n\n[[tables]]\nposition = 1\ntitle = "First token"\nquestion = "which came first"\n'
            'setting = "30 steps"\nsources = ["first_token/runs"]\nmetric = "test accuracy"\naxis = "accuracy"\n'
            'columns = [["test accuracy", "accuracy"]]\ndigits = 3\nreference = "none"\n')
  (table, rows, unscored), = report.summary_tables(str(tmp_path / 'results'))
  assert table.task == NAME and unscored == {}
  for row in rows:  # The table's figures are the runs' own.
    assert row['n'] == 1
    assert row['stats']['test accuracy']['mean'] == np.mean(accuracies[row['encoding']])
    assert row['stats']['test accuracy']['values'] == accuracies[row['encoding']]
  assert [row['encoding'] for row in rows] == sorted(accuracies, key=lambda e: (-np.mean(accuracies[e]), e))
  assert report.markdown_table(1, table, rows, '')[0].startswith('#### 1. First token: 30 steps')


def test_no_other_file_names_the_task():
  """No code, config or data file but this one (the documents may point to it, and a test run's log names it)."""
  listed = subprocess.run(['git', 'grep', '-l', '--untracked', NAME, '--', ':!*.md', ':!*.log'], cwd=ROOT,
                          capture_output=True, text=True)
  if listed.returncode > 1:
    pytest.skip('not a git checkout')
  assert listed.stdout.split() == ['tests/test_one_file_task.py']


def test_the_task_is_found_by_its_module_name_and_a_wrong_name_is_named():
  assert tasks.find(NAME) is SPEC and tasks.find('listops') is tasks.TASKS['listops']
  for name, message in (('no_such_task', r"task 'no_such_task' is not a task folder's \(listops, lm, translation\) "
                                         r'nor an importable module'),
                        ('json', r"module 'json' has no SPEC"),
                        ('lra_posenc.listops.spec', r"SPEC.name is 'listops'; a task outside the package is named by")):
    with pytest.raises(ValueError, match=message):
      tasks.find(name)
  with pytest.raises(ValueError, match=f"task '{NAME}' has no transformer_of .*, which drawing its encodings needs"):
    SPEC.needs('transformer_of', 'drawing its encodings')
