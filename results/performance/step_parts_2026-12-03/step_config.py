"""The config each A/B script of this folder times: `lm1b` or `nanogpt`, the language model's `:cpu` recipe in that
peer's form as scripts/side_by_side_lm.py builds it, or CONFIG[:ARG] with `--config.KEY=VALUE` flags, read as the
trainer reads them."""
import importlib.util

from lra_posenc.config_files import config_of_flags


def step_config(spec: str, flags: list[str]):
  if spec not in ('lm1b', 'nanogpt'):
    return config_of_flags([f'--config={spec}', *flags])
  loader = importlib.util.spec_from_file_location('side_by_side_lm', 'scripts/side_by_side_lm.py')
  side_by_side = importlib.util.module_from_spec(loader)
  loader.loader.exec_module(side_by_side)
  return side_by_side.our_config('configs/lm/shakespeare_char.py', 'cpu', lm1b_form=spec == 'lm1b')
