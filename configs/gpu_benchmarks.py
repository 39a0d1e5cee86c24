"""The GPU campaign's benchmarks (`scripts/gpu_campaign.py --benchmarks=NAME,...`), by name.

Each is a command after the Python executable, run from the repository root, and the seconds it may take. The
campaign fills in {figures} (the JSON of figures it reads back into its summary), {traces} (where jax.profiler
writes 20 more steps) and {peer_models} (Flax's examples/wmt/models.py).
  lra: LRA ListOps in its `fused` variant;
  tiny: the Multi30k `:tiny` step as trained, 4096 tokens a step (its batches are token budgets; the benchmark's
    are rows);
  base: the base translation step in bfloat16;
  side_by_side: ours against Flax's examples/wmt at the base shapes, bfloat16;
  attention: tests/test_attention.py's cuDNN tests.
get_config('tiny'): the same at CPU sizes, compiled in seconds, for the test suite.
"""
BENCHMARK = ['-m', 'lra_posenc.studies.benchmark', '--eval=false', '--decode=false', '--out={figures}',
             '--trace_dir={traces}']
# The tiny variant's model: CPU sizes.
TINY_MODEL = ['--config.model.num_layers=1', '--config.model.emb_dim=32', '--config.model.qkv_dim=32',
              '--config.model.mlp_dim=64', '--config.training.batch_size=8']


def get_config(arg: str | None = None) -> dict[str, dict]:
  if arg not in (None, 'tiny'):
    raise ValueError(f'config argument {arg!r} is not one of [None, {"tiny"!r}]')
  if arg == 'tiny':
    timing = ['--windows=1', '--steps_per_window=2', '--trace_steps=2']
    lra = ['--task=listops', '--config=configs/listops/lra.py:cpu', *TINY_MODEL, '--encodings=none,alibi']
    tiny = ['--task=translation', '--config=configs/translation/multi30k.py:sweep', *TINY_MODEL,
            '--config.data.tokenizer.vocab_size=256', '--config.data.max_length=16', '--encodings=rope']
    base = tiny
    shapes = ['--layers=1', '--dim=32', '--heads=2', '--mlp=64', '--batch=8', '--length=16', '--vocab=256',
              '--windows=2', '--steps=2']
    attention_tests = ['-k', 'oracle and (t5 or rope)']
    seconds = {'lra': 60, 'tiny': 60, 'base': 60, 'side_by_side': 120, 'attention': 120}
  else:
    timing = ['--windows=3', '--steps_per_window=20']
    lra = ['--task=listops', '--config=configs/listops/lra.py:fused', '--encodings=none']
    tiny = ['--task=translation', '--config=configs/translation/multi30k.py:tiny', '--encodings=sinusoidal',
            '--config.training.max_tokens=0', '--config.training.batch_size=128', '--config.data.max_length=32']
    base = ['--task=translation', '--config=configs/translation/multi30k.py', '--config.model.dtype=bfloat16',
            '--config.model.attention_dropout_rate=0.0', '--encodings=none']
    shapes = ['--layers=6', '--dim=512', '--heads=8', '--mlp=2048', '--batch=128', '--length=64', '--vocab=8000']
    attention_tests = ['-k', 'cudnn']
    # tiny: 60 s was short on the H100; side_by_side printed nothing within 130 s at these shapes there (2026-11-28).
    seconds = {'lra': 150, 'tiny': 150, 'base': 90, 'side_by_side': 240, 'attention': 120}
  commands = {
      'lra': [*BENCHMARK, *lra, *timing],
      'tiny': [*BENCHMARK, *tiny, *timing],
      'base': [*BENCHMARK, *base, *timing],
      'side_by_side': ['scripts/side_by_side_wmt.py', '--peer_models={peer_models}', '--dtype=bfloat16', *shapes,
                       '--output={figures}'],
      'attention': ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests/test_attention.py', '-m', 'not slow',
                    *attention_tests],
  }
  return {name: {'command': command, 'seconds': seconds[name]} for name, command in commands.items()}
