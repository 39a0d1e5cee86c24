"""A config file read as `--config=PATH:ARG` reads it, for tools that take one without the flag."""
import importlib.util
import os

import ml_collections


def load_config(path: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`get_config(arg)` (or `get_config()`) of the Python file at `path`, as ml_collections' config flags call it."""
  spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
  if spec is None or not os.path.isfile(path):
    raise FileNotFoundError(f'config file {path!r} does not exist')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg) if arg is not None else module.get_config()
