"""Config files read as a trainer's flags read them: `load_config` a file as `--config=PATH:ARG` reads it, for
tools that take one without the flag; `config_of_flags` a trainer's whole `--config` flags, overrides included."""
import importlib.util
import os
import re
from collections.abc import Sequence

import ml_collections
from absl import flags as absl_flags
from ml_collections import config_flags


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
