"""Config files read as a trainer's flags read them: `load_config` a file as `--config=PATH:ARG` reads it, for
tools that take one without the flag; `config_of_flags` a trainer's whole `--config` flags, overrides included;
`config_argument` the ARG every config file takes."""
import importlib.util
import os
import re
from collections.abc import Sequence

import ml_collections
from absl import flags as absl_flags
from ml_collections import config_flags

from lra_posenc import encodings

ENCODING_MODULE = 'encoding_module='


def _split_argument(arg: str | None) -> tuple[str | None, list[str]]:
  """A config file's ARG as its variant (None: the file's default) and the encoding modules it names."""
  parts = [] if arg is None else arg.split(',')
  rest = [part for part in parts if not part.startswith(ENCODING_MODULE)]
  return ','.join(rest) if rest else None, [part.removeprefix(ENCODING_MODULE) for part in parts
                                            if part.startswith(ENCODING_MODULE)]


def config_argument(arg: str | None, variants: Sequence[str | None]) -> tuple[str | None, str]:
  """A config file's ARG, `VARIANT[,encoding_module=PATH]` (or `encoding_module=PATH` for the file's default
  variant), as its `get_config` reads it: the variant, one of `variants`, and the path of an encoding module
  ('' for none), whose encoding is registered here (`encodings.load_module`) so that the config's
  `model.pos_encoding_options` has its section, which `--config.` overrides can then set. Raises ValueError."""
  variant, modules = _split_argument(arg)
  if variant not in variants:
    raise ValueError(f'config argument {variant!r} is not one of {list(variants)}'
                     + (f' (with ,{ENCODING_MODULE}PATH)' if modules else ''))
  if len(modules) > 1 or modules and not modules[0]:
    raise ValueError(f'config argument {arg!r}: at most one {ENCODING_MODULE}PATH, with a path')
  if modules:
    encodings.load_module(modules[0])
  return variant, modules[0] if modules else ''


def encoding_module_of(config: str) -> str:
  """The encoding module a `--config` value (PATH[:ARG]) names, loaded (its encoding registered); '' for none."""
  _, modules = _split_argument(config.partition(':')[2] or None)
  if modules:
    encodings.load_module(modules[0])
  return modules[0] if modules else ''


def load_config(path: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`get_config(arg)` (or `get_config()`) of the Python file at `path`, as ml_collections' config flags call it."""
  spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
  if spec is None or not os.path.isfile(path):
    raise FileNotFoundError(f'config file {path!r} does not exist')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg) if arg is not None else module.get_config()


# A flag of the config or one of its keys, in every form ml_collections' config flags accept.
CONFIG_FLAG = re.compile(r'-{1,2}(no)?config([.=]|$)')


def config_of_flags(flags: Sequence[str]) -> ml_collections.ConfigDict:
  """The config a trainer given `flags` reads: its `--config=PATH[:ARG]` with the `--config.KEY=VALUE` overrides
  among `flags`, parsed by ml_collections' config flags as the trainer's own are; other flags are ignored. A key
  the config lacks raises AttributeError or KeyError, a bad value or order absl's flags.Error, a missing file
  OSError."""
  argv = ['config_of_flags', *(flag for flag in flags if CONFIG_FLAG.match(flag))]
  values = absl_flags.FlagValues()
  config_flags.DEFINE_config_file('config', flag_values=values, lock_config=True, sys_argv=argv)
  values(argv)
  return values.config
