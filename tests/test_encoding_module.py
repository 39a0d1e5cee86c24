"""An encoding outside the package: one file, named by the config argument (`:VARIANT,encoding_module=PATH`),
registered before the config is built, so its options are config keys; checked as the package's own are, and a
bad file is one error naming it, the registry left as it was."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from lra_posenc import encodings, tasks
from lra_posenc.config_files import config_of_flags, load_config
from lra_posenc.lm import settings as lm_settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LM_CONFIG = os.path.join(ROOT, 'configs', 'lm', 'shakespeare_char.py')

# Vaswani et al.'s table times a factor: an idea tried without touching the package.
SCALED = '''
import dataclasses

import numpy as np

from lra_posenc.encodings import base
from lra_posenc.encodings.sinusoidal import sinusoidal_table


@dataclasses.dataclass(frozen=True)
class ScaledOptions:
  scale: float = 1.0

  def __post_init__(self):
    if self.scale <= 0:
      raise ValueError(f'scale={self.scale} must be > 0')


@base.register('scaled_sinusoidal')
class ScaledSinusoidal(base.TableEncoding):
  options: ScaledOptions = ScaledOptions()

  def table(self, num_positions):
    return sinusoidal_table(num_positions, self.dim) * np.float32(self.options.scale)
'''


@pytest.fixture
def registry():
  """The registry and the loaded modules as they were, after the test: an encoding a test loads leaves with it."""
  before, loaded = dict(encodings.REGISTRY), dict(encodings._LOADED)
  yield
  encodings.REGISTRY.clear()
  encodings.REGISTRY.update(before)
  encodings._LOADED.clear()
  encodings._LOADED.update(loaded)
  encodings.default_terms.cache_clear()


def write(tmp_path, text: str, name: str = 'my_encoding.py') -> str:
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def test_a_configs_encoding_module_gives_its_options_and_the_table_the_paper_and_the_factor_give(tmp_path,
                                                                                                  registry):
  path = write(tmp_path, SCALED)
  config = config_of_flags([f'--config={LM_CONFIG}:cpu,encoding_module={path}',
                            '--config.model.pos_encoding=scaled_sinusoidal',
                            '--config.model.pos_encoding_options.scaled_sinusoidal.scale=0.5',
                            f'--config.data.text_file={tmp_path}/input.txt'])
  assert config.model.pos_encoding_module == path  # What config.json records, for whoever reads the run.
  model = lm_settings.read_settings(config).model.config
  assert model.pos_encoding == 'scaled_sinusoidal' and model.pos_encoding_options.scale == 0.5
  table = encodings.create('scaled_sinusoidal', model.pos_encoding_options, max_len=16, dim=8, num_heads=2,
                           head_dim=4).table(16)
  positions, pairs = np.arange(16, dtype=np.float64)[:, None], np.arange(4, dtype=np.float64)[None]
  angles = positions / 10000.0 ** (2 * pairs / 8)  # Vaswani et al. (2017), section 3.5.
  np.testing.assert_allclose(table[:, 0::2], 0.5 * np.sin(angles), atol=1e-6)
  np.testing.assert_allclose(table[:, 1::2], 0.5 * np.cos(angles), atol=1e-6)
  assert encodings.load_module(path) == 'scaled_sinusoidal'  # Again: the same encoding, not a second one.
  with pytest.raises(ValueError, match=r'model.pos_encoding_options.scaled_sinusoidal.scale=-1.0 must be > 0'):
    config.model.pos_encoding_options.scaled_sinusoidal.scale = -1.0
    lm_settings.read_settings(config)
  with pytest.raises(ValueError, match=r"config argument 'cpux' is not one of \[None, 'cpu'\] \(with ,encoding_mod"):
    load_config(LM_CONFIG, f'cpux,encoding_module={path}')


@pytest.mark.parametrize('text, message', [
    ('import dataclasses\n', r'registers 0 encodings; an encoding module registers exactly one'),
    (SCALED + "\n\n@base.register('other')\nclass Other(base.TableEncoding):\n  options: ScaledOptions = "
     'ScaledOptions()\n', r'registers 2 encodings \(scaled_sinusoidal, other\)'),
    (SCALED.replace("'scaled_sinusoidal'", "'rope'"), r"ValueError: two encodings are registered as 'rope'"),
    (SCALED.replace('def table', 'def table(', 1), r'SyntaxError: .*line 2[0-9]'),
    ('raise RuntimeError("no GPU here")\n', r'RuntimeError: no GPU here'),
])
def test_a_bad_encoding_module_is_one_error_naming_it_and_registers_nothing(tmp_path, registry, text, message):
  path, before = write(tmp_path, text), list(encodings.REGISTRY)
  with pytest.raises(ValueError, match=rf'^encoding module {path}: {message}'):
    encodings.load_module(path)
  assert list(encodings.REGISTRY) == before
  with pytest.raises(ValueError, match=rf'^encoding module {tmp_path}/none.py: no such file$'):
    load_config(LM_CONFIG, f'cpu,encoding_module={tmp_path}/none.py')


@pytest.mark.slow
def test_a_sweep_trains_an_encoding_from_a_file_outside_the_package(tmp_path, toy_text):
  """The sweep's config check and its training process load the module from the config argument, as this one."""
  path = write(tmp_path, SCALED)
  output = tmp_path / 'sweep'
  settings = [f'--set=data.text_file={toy_text}/input.txt', '--set=data.block_size=16', '--set=model.num_layers=1',
              '--set=model.emb_dim=32', '--set=model.qkv_dim=32', '--set=model.mlp_dim=64',
              '--set=training.num_train_steps=4', '--set=training.log_every_steps=2', '--set=evaluation.every_steps=4',
              '--set=checkpoint.every_steps=4', '--set=scoring.length_multiples=(1,)']
  sweep = [sys.executable, '-m', 'lra_posenc.studies.sweep', '--task=lm']
  process = subprocess.run([*sweep, f'--config={LM_CONFIG}:cpu,encoding_module={path}', '--seeds=0',
                            '--variants=scaled_sinusoidal:scale=0.5', f'--output_dir={output}', *settings],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert process.returncode == 0, process.stderr[-3000:]
  (run,) = os.listdir(output / 'scaled_sinusoidal__scale-0.5')
  with open(output / 'scaled_sinusoidal__scale-0.5' / run / 'config.json') as f:
    config = json.load(f)
  assert config['model']['pos_encoding_module'] == path
  assert config['model']['pos_encoding_options']['scaled_sinusoidal'] == {'scale': 0.5}


@pytest.mark.parametrize('config_file, variant', [('configs/listops/lra.py', 'sweep'),
                                                  ('configs/translation/multi30k.py', 'sweep'),
                                                  ('configs/lm/shakespeare_char.py', 'cpu')])
def test_every_tasks_model_reads_an_encoding_from_a_module(tmp_path, registry, config_file, variant):
  path = write(tmp_path, SCALED)
  config = config_of_flags([f'--config={os.path.join(ROOT, config_file)}:{variant},encoding_module={path}',
                            '--config.model.pos_encoding=scaled_sinusoidal',
                            '--config.model.pos_encoding_options.scaled_sinusoidal.scale=2.0'])
  if config.task == 'lm':
    config.data.text_file = str(tmp_path / 'input.txt')
  model = tasks.TASKS[config.task].transformer_of(config)
  assert (model.pos_encoding, model.pos_encoding_options.scale, model.pos_encoding_module) == (
      'scaled_sinusoidal', 2.0, path)
