"""The benchmark harness: FLOP counts, timing, MFU, decoding, the pipeline gap and the CLI."""
import functools
import json
import os
import re
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.listops import lra
from configs.translation import multi30k
from conftest import tiny_config
from lra_posenc import encodings
from lra_posenc.listops import settings as listops_settings
from lra_posenc.listops import train as listops_train
from lra_posenc.models import flops
from lra_posenc.models.transformer import TransformerConfig
from lra_posenc.studies import benchmark
from lra_posenc.training.run_files import read_history
from lra_posenc.translation import settings as translation_settings
from lra_posenc.translation import train as translation_train
from lra_posenc.translation.translator import create_translator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The closed form of the convention (2 FLOPs per multiply-add of every matrix product, attention over
# all query-key pairs) for a Transformer without an encoding's own products: the oracle of the traced count.
def attention_flops(cfg: TransformerConfig, query_length: int, key_length: int) -> int:
  """Projections (query, key, value, output) and the two products over query-key pairs."""
  projections = 2 * cfg.emb_dim * cfg.qkv_dim * (2 * query_length + 2 * key_length)
  pairs = 2 * 2 * query_length * key_length * cfg.qkv_dim
  return projections + pairs


def mlp_flops(cfg: TransformerConfig, length: int) -> int:
  return 2 * 2 * length * cfg.emb_dim * cfg.mlp_dim


def encoder_flops(cfg: TransformerConfig, length: int) -> int:
  return cfg.num_layers * (attention_flops(cfg, length, length) + mlp_flops(cfg, length))


def decoder_flops(cfg: TransformerConfig, target_length: int, source_length: int) -> int:
  per_layer = (attention_flops(cfg, target_length, target_length) + attention_flops(cfg, target_length, source_length)
               + mlp_flops(cfg, target_length))
  return cfg.num_layers * per_layer


def classifier_flops(cfg: TransformerConfig, length: int, classifier_dim: int, num_classes: int) -> int:
  """One example of `length` encoder positions (with any CLS position) through encoder and MLP head."""
  return encoder_flops(cfg, length) + 2 * cfg.emb_dim * classifier_dim + 2 * classifier_dim * num_classes


def seq2seq_flops(cfg: TransformerConfig, source_length: int, target_length: int, target_vocab_size: int) -> int:
  """One sentence pair through encoder, decoder and output logits (teacher forcing)."""
  return (encoder_flops(cfg, source_length) + decoder_flops(cfg, target_length, source_length)
          + 2 * target_length * cfg.emb_dim * target_vocab_size)


def small_listops_config(**model):
  config = lra.get_config('cpu')
  config.data.max_length = 16
  config.model.update(emb_dim=32, qkv_dim=32, mlp_dim=48, classifier_dim=24, num_heads=4, num_layers=2, **model)
  config.training.batch_size = 8
  config.evaluation.batch_size = 8
  return config


def small_translation_config(**model):
  config = multi30k.get_config('sweep')
  config.data.update(max_length=12, max_eval_source_length=14)
  config.decoding.max_output_length = 14
  config.data.tokenizer.vocab_size = 50
  config.model.update(emb_dim=32, qkv_dim=32, mlp_dim=48, num_heads=4, num_layers=1, **model)
  config.training.batch_size = 4
  config.evaluation.batch_size = 4
  config.decoding.batch_size = 4
  config.decoding.beam_size = 2
  return config


@pytest.mark.parametrize('pooling,pos_encoding', [('cls', 'none'), ('mean', 't5'), ('cls', 'rope')])
def test_classifier_flops_match_the_traced_matrix_products(pooling, pos_encoding):
  config = small_listops_config(pooling=pooling, pos_encoding=pos_encoding)
  model = listops_settings.create_model(config)
  tokens = np.ones((3, 16), np.int32)
  params = model.init(jax.random.PRNGKey(0), tokens, train=False)['params']
  forward = lambda p, t: model.apply({'params': p}, t, train=False)
  positions = 16 + (pooling == 'cls')
  per_example = classifier_flops(model.config, positions, 24, 10)
  assert flops.traced_matmul_flops(forward, params, tokens) == 3 * per_example
  gradient = jax.grad(lambda p, t: forward(p, t).sum())
  # A shared bias's gradient is summed over the batch by a product with ones (models/attention.py): not model FLOPs.
  batch_sums = 2 * 3 * 4 * positions ** 2 * 2 if pos_encoding == 't5' else 0  # batch x heads x pairs x layers.
  assert flops.traced_matmul_flops(gradient, params, tokens) == flops.TRAIN_STEP_FACTOR * 3 * per_example + batch_sums


@pytest.mark.parametrize('share_embeddings', [True, False])
def test_seq2seq_flops_match_the_traced_matrix_products(share_embeddings):
  config = small_translation_config(share_embeddings=share_embeddings)
  config.data.tokenizer.joint = share_embeddings
  model = create_translator(config, None, (40 if share_embeddings else 50, 40)).model
  sources, targets = np.ones((2, 9), np.int32), np.ones((2, 7), np.int32)
  params = model.init(jax.random.PRNGKey(0), sources, targets, train=False)['params']
  forward = lambda p: model.apply({'params': p}, sources, targets, train=False)
  per_example = seq2seq_flops(model.config, 9, 7, 40)
  assert flops.traced_matmul_flops(forward, params) == 2 * per_example


def test_workload_flops_are_the_closed_form_and_the_products_an_encoding_adds():
  """MFU's count: without an encoding, the closed form, all per example. Products of positions alone run
  once per call, whatever the batch: FIRE's and dynamic_bias's MLPs over position pairs, Transformer-XL's
  projection of relative positions. Products with content run per example: CoPE's gates, Transformer-XL's
  content-position logits, DAPE's MLP over each pair's logits and bias (and the logits it reads). Every other
  encoding adds none."""
  counts = {name: listops_train.benchmark_workload(small_listops_config(pos_encoding=name)).forward_flops
            for name in encodings.REGISTRY}
  model = listops_settings.create_model(small_listops_config())
  none = counts['none']
  assert none == flops.ForwardFlops(per_example=classifier_flops(model.config, 16 + 1, 24, 10), per_call=0)
  assert {name for name, count in counts.items() if count.per_call} == {'fire', 'dynamic_bias', 'transformer_xl'}
  assert {name for name, count in counts.items() if count.per_example != none.per_example} == {
      'cope', 'dape', 'transformer_xl'}
  # DAPE, 2 layers, 17 positions, 4 heads of 8: q.k, then 2 x 4 channels -> 32 -> 4, per pair.
  assert counts['dape'].per_example - none.per_example == 2 * 2 * 17 ** 2 * (4 * 8 + 2 * 4 * 32 + 32 * 4)
  assert all(count.per_call >= 0 and count.per_example >= none.per_example for count in counts.values())
  # dynamic_bias at width 32 / 4 = 8, depth 2, 4 heads: per pair of the 17 positions, 1 -> 8 -> 8 -> 4.
  width, pairs = 8, 17 ** 2
  assert counts['dynamic_bias'].per_call == 2 * pairs * (1 * width + width * width + width * 4)
  assert counts['dynamic_bias'].train_step(examples=32, calls=2) == 3 * (32 * none.per_example
                                                                         + 2 * counts['dynamic_bias'].per_call)
  translation = small_translation_config()
  workload = translation_train.benchmark_workload(translation)
  assert workload.forward_flops == flops.ForwardFlops(
      per_example=seq2seq_flops(translation_settings.transformer_of(translation), 12, 12, 50), per_call=0)


def test_traced_flops_count_scan_trips_and_refuse_while_loops():
  matmul = lambda x: x @ x
  x = np.ones((4, 4), np.float32)
  assert flops.traced_matmul_flops(matmul, x) == 2 * 4 ** 3
  assert flops.traced_matmul_flops(lambda x: jax.lax.scan(lambda c, _: (matmul(c), None), x, None, 5)[0], x) \
      == 5 * 2 * 4 ** 3
  with pytest.raises(ValueError, match='while loop'):
    flops.traced_matmul_flops(lambda x: jax.lax.while_loop(lambda c: c.sum() < 0, matmul, x), x)


def test_peak_flops_follow_the_hardware():
  sxm, pcie, h200 = 'NVIDIA H100 80GB HBM3', 'NVIDIA H100 PCIe', 'NVIDIA H200'
  for kind in (sxm, pcie, h200, 'NVIDIA A100-SXM4-40GB'):
    # Dense TF32 tensor cores (JAX's default float32 matmul precision there) run at half the bfloat16 rate;
    # full float32 ('highest') runs on the CUDA cores, under a sixth of TF32's.
    assert benchmark.peak_flops(kind, 'bfloat16') == 2 * benchmark.peak_flops(kind, 'float32')
    assert benchmark.peak_flops(kind, 'float32', 'highest') < benchmark.peak_flops(kind, 'float32') / 6
    assert benchmark.peak_flops(kind, 'float32', 'bfloat16') == benchmark.peak_flops(kind, 'bfloat16')
    assert benchmark.peak_flops(kind, 'bfloat16', 'highest') == benchmark.peak_flops(kind, 'bfloat16')
  assert benchmark.peak_flops(pcie, 'bfloat16') < benchmark.peak_flops(sxm, 'bfloat16')  # Lower clocks, fewer SMs.
  assert benchmark.peak_flops(h200, 'bfloat16') == benchmark.peak_flops(sxm, 'bfloat16')  # The same GH100 die.
  assert benchmark.peak_flops('cpu', 'float32') is None


def test_timers_are_built_and_timed_in_rotating_rounds_each_reported_as_it_ends():
  class FixedTimer:
    def __init__(self, name, seconds, calls):
      self.name, self.seconds, self.calls = name, seconds, calls

    def run_window(self, steps):
      self.calls.append(self.name)
      return self.seconds * steps

  calls, lines = [], []
  timers = benchmark.built_timers({name: functools.partial(FixedTimer, name, seconds, calls)
                                      for name, seconds in (('a', 0.5), ('b', 0.25))}, report=lines.append)
  assert [line.split(' built')[0] for line in lines] == ['[a]', '[b]']
  seconds = benchmark.interleaved_windows(timers, windows=2, steps_per_window=2, report=lines.append)
  assert calls == ['a', 'b', 'b', 'a', 'a', 'b']  # A warm-up round, then the order rotates.
  assert seconds == {'a': [1.0, 1.0], 'b': [0.5, 0.5]}  # The warm-up round is left out.
  assert lines[2:] == ['round 0/2 (warm-up): a 500.0 ms/step, b 250.0 ms/step',
                       'round 1/2: b 250.0 ms/step, a 500.0 ms/step', 'round 2/2: a 500.0 ms/step, b 250.0 ms/step']


@pytest.mark.slow
def test_train_timer_figures_are_consistent():
  config = small_listops_config()
  workload = listops_train.benchmark_workload(config)
  timers = {name: benchmark.TrainStepTimer(workload) for name in ('a', 'b')}
  seconds = benchmark.interleaved_windows(timers, windows=3, steps_per_window=2)
  assert [len(s) for s in seconds.values()] == [3, 3]
  # Windows of 1, 2 and 4 seconds at 2 steps each: a median of 1 step/s, the best 2.
  summary = timers['a'].summary([1.0, 2.0, 4.0], 2)
  assert (summary['steps_per_second'], summary['best_steps_per_second']) == (1.0, 2.0)
  assert summary['examples_per_second'] == 8 and summary['tokens_per_second'] == 8 * 16  # Batch 8 x 16 tokens.
  assert summary['mfu'] is None  # No known peak for a CPU.
  # A device whose peak is exactly the model FLOP/s reached is fully used.
  reached = summary['model_tflops_per_second'] / jax.local_device_count()
  assert timers['a'].summary([1.0, 2.0, 4.0], 2, peak_tflops=reached)['mfu'] == pytest.approx(1.0)
  # XLA's count of the compiled step holds the model's matrix products and more (elementwise work).
  assert summary['xla_flops'] >= summary['model_tflops_per_second'] * 1e12 / jax.local_device_count()
  assert summary['compiled_bytes_per_device'] > 0 and summary['compile_seconds'] > 0
  # Same seed, same batch: the first step's loss is the task's loss of the initial parameters on that batch
  # (lra.py:cpu has no dropout, so the step's key does not enter it).
  assert summary['first_step_loss'] == timers['b'].first_step_loss
  params = jax.jit(workload.task.init_params)(jax.random.PRNGKey(workload.seed))
  batch = workload.batch(workload.train_batch_size, np.random.default_rng(workload.seed))
  direct = workload.task.metrics(params, batch, jax.random.PRNGKey(0))
  assert summary['first_step_loss'] == pytest.approx(float(direct['loss'] / direct['count']), rel=1e-5)


def test_evaluation_and_decoding_figures():
  config = small_translation_config(dtype='bfloat16')
  workload = translation_train.benchmark_workload(config)
  assert workload.dtype == 'bfloat16'  # The peak an MFU is taken against.
  evaluation = benchmark.measure_evaluation(workload, windows=2, steps_per_window=2)
  assert evaluation['tokens_per_second'] == evaluation['examples_per_second'] * 2 * 12
  decoding = workload.decode(2)
  assert decoding['sentences_per_second'] > 0 and decoding['beam_size'] == 2
  assert 0 < decoding['output_ids_per_sentence'] <= 14


@pytest.mark.slow
def test_pipeline_gap_compares_the_real_loop_with_on_device_batches(tiny_data_dir, tmp_path):
  config = tiny_config(tiny_data_dir)
  gap = benchmark.pipeline_gap(config, listops_train.create_task, str(tmp_path), windows=2, steps_per_window=4)
  # The real side is the real run's own record: its log windows after the first (which compiles).
  (run_dir,) = tmp_path.glob('pipeline_run_*')
  logged = [record['steps_per_second'] for record in read_history(str(run_dir), 'train')]
  assert gap['real_window_steps_per_second'] == logged[1:] and len(logged) == 3
  assert gap['real_steps_per_second'] == pytest.approx(np.median(logged[1:]))
  assert gap['synthetic_steps_per_second'] == pytest.approx(np.median(gap['synthetic_window_steps_per_second']))
  assert gap['gap'] == pytest.approx(1 - np.median(logged[1:]) / gap['synthetic_steps_per_second'])
  assert gap['real_steps_per_second'] > 0 and gap['host_batches_per_second'] > gap['real_steps_per_second']


def test_operation_times_name_what_a_step_spends_its_time_on():
  """A step that is one large sort after a cheap scaling: the sort, once a step, is most of its time."""
  x = jax.random.normal(jax.random.PRNGKey(0), (1 << 18,))
  step = jax.jit(lambda x: jnp.sort(1.5 * x))
  step(x).block_until_ready()

  def run_window(steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
      out = step(x)
    out.block_until_ready()
    return time.perf_counter() - start

  profile = benchmark.operation_times(run_window, 4)
  top = profile['kinds'][0]
  assert (top['kind'], top['calls_per_step']) == ('sort', 1.0)
  assert 0.5 * profile['step_seconds'] < top['seconds_per_step'] <= profile['step_seconds']
  # Kinds drop the instruction's number and leave out the runtime's own events.
  assert not any(re.search(r'\.\d+$|::', row['kind']) for row in profile['kinds'])


def run_cli(*args: str) -> str:
  completed = subprocess.run([sys.executable, '-m', 'lra_posenc.studies.benchmark', *args],
                             capture_output=True, text=True, timeout=600, env=os.environ | {'JAX_PLATFORMS': 'cpu'})
  assert completed.returncode == 0, completed.stderr[-3000:]
  return completed.stdout


SMALL_CLI = ['--task=listops', '--config=configs/listops/lra.py:cpu', '--config.data.max_length=16',
             '--windows=2', '--steps_per_window=2']


@pytest.mark.slow
def test_cli_reports_every_encoding_against_the_reference(tmp_path):
  out = tmp_path / 'benchmark.json'
  stdout = run_cli(*SMALL_CLI, '--encodings=rope,none', '--reference=none', f'--out={out}')
  results = json.loads(out.read_text())
  assert results['reference'] == 'none' and list(results['encodings']) == ['rope', 'none']
  none, rope = results['encodings']['none'], results['encodings']['rope']
  assert none['step_time_ratio'] == none['best_step_time_ratio'] == none['xla_bytes_ratio'] == 1.0
  assert rope['step_time_ratio'] == none['train']['steps_per_second'] / rope['train']['steps_per_second']
  assert rope['best_step_time_ratio'] == (max(none['train']['window_steps_per_second'])
                                          / max(rope['train']['window_steps_per_second']))
  # Rotating queries and keys adds element-wise work and no matrix products.
  assert rope['xla_bytes_ratio'] > 1.0 and rope['xla_flops_ratio'] > 1.0
  assert rope['eval']['examples_per_second'] > 0 and 'decode' not in rope
  assert 'time/none' in stdout and 'best-window' in stdout and 'rope' in stdout


@pytest.mark.slow
def test_cli_scaling_over_forced_devices_keeps_the_loss(tmp_path):
  out = tmp_path / 'scaling.json'
  stdout = run_cli(*SMALL_CLI, '--device_counts=1,2', '--eval=false', f'--out={out}')
  results = json.loads(out.read_text())
  runs = results['device_counts']
  assert list(runs) == ['1', '2']
  # Each run had the devices it was given, on the CPU, and the file names the CPU as what was timed.
  assert [run['local_devices'] for run in runs.values()] == [1, 2]
  assert results['platform'] == 'cpu' and 'local_devices' not in results
  np.testing.assert_allclose(runs['2']['first_step_loss'], runs['1']['first_step_loss'], rtol=1e-5)
  assert 'speed-up' in stdout


@pytest.mark.slow
def test_cli_profiles_the_train_step_by_operation_kind(tmp_path):
  out = tmp_path / 'profile.json'
  stdout = run_cli(*SMALL_CLI, '--profile_ops', f'--out={out}')
  profile = json.loads(out.read_text())['operation_times']
  assert profile['steps'] == 2 and profile['step_seconds'] > 0
  # The costliest kinds first; a train step runs many kinds of operation.
  seconds = [row['seconds_per_step'] for row in profile['kinds']]
  assert seconds == sorted(seconds, reverse=True) and len(seconds) > 5
  assert 'ms a step over 2 steps' in stdout and profile['kinds'][0]['kind'] in stdout


@pytest.mark.parametrize('flags, message', [
    (['--encodings=fourier'], "--encodings='fourier' is not one of"),
    (['--encodings=rope,alibi', '--reference=none'], "--reference='none' is not one of ['rope', 'alibi']"),
    (['--memory_grid', '--profile_ops'], '--memory_grid and --profile_ops: one mode at a time'),
    (['--profile_ops', '--encodings=rope'], "--profile_ops measures the config's own encoding"),
    (['--task=translation'], "--task=translation, but the config is of task 'listops'")])
def test_cli_names_a_bad_encoding_or_reference(flags, message):
  completed = subprocess.run([sys.executable, '-m', 'lra_posenc.studies.benchmark', *SMALL_CLI, *flags],
                             capture_output=True, text=True, timeout=300)
  assert completed.returncode != 0 and message in completed.stderr
