"""The package's import graph: no cycles, models (with encodings) import nothing of training, and the studies sit
above everything else."""
import ast
import importlib
import os
import re

from lra_posenc.tasks import TASKS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = 'lra_posenc'


def module_files() -> dict[str, str]:
  """Module name -> path, for every module of the package."""
  modules = {}
  for directory, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
    for name in files:
      if name.endswith('.py'):
        parts = os.path.relpath(os.path.join(directory, name), ROOT)[:-3].split(os.sep)
        modules['.'.join(parts[:-1] if parts[-1] == '__init__' else parts)] = os.path.join(directory, name)
  return modules


def import_graph() -> dict[str, set[str]]:
  """Module -> the package's modules it imports, anywhere in its file."""
  modules = module_files()
  graph = {}
  for module, path in modules.items():
    with open(path) as f:
      tree = ast.parse(f.read(), path)
    imported = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        imported.update(alias.name for alias in node.names)
      elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        # `from a.b import c` imports module a.b.c where there is one, else names of a.b.
        imported.update(f'{node.module}.{alias.name}' if f'{node.module}.{alias.name}' in modules else node.module
                        for alias in node.names)
    graph[module] = {name for name in imported if name in modules and name != module}
  return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One import cycle of `graph` (its modules in order, the first repeated at the end), or None."""
  state, path = {}, []

  def visit(module: str) -> list[str] | None:
    state[module] = 'open'
    path.append(module)
    for imported in sorted(graph.get(module, ())):
      if state.get(imported) == 'open':
        return path[path.index(imported):] + [imported]
      if imported not in state and (found := visit(imported)):
        return found
    path.pop()
    state[module] = 'done'
    return None

  for module in sorted(graph):
    if module not in state and (found := visit(module)):
      return found
  return None


def test_the_cycle_finder_finds_a_cycle_and_none_where_there_is_none():
  assert cycle({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == ['a', 'b', 'c', 'a']
  assert cycle({'a': {'b', 'c'}, 'b': {'c'}, 'c': set()}) is None


def test_the_package_has_no_import_cycle():
  graph = import_graph()
  assert len(graph) > 40 and 'lra_posenc.training.settings' in graph['lra_posenc.listops.settings']
  assert cycle(graph) is None


def task_folders() -> dict[str, str]:
  """Task name -> its folder's package (lra_posenc.FOLDER), as the task registry finds them."""
  return {name: spec.module.rsplit('.', 1)[0] for name, spec in TASKS.items()}


def test_models_and_encodings_import_nothing_of_training_or_the_tasks():
  """The model layer is below the trainer and the tasks: a model can be built and tested without them."""
  below = ('lra_posenc.models', 'lra_posenc.encodings')
  above = ('lra_posenc.training',) + tuple(task_folders().values())
  wrong = {module: sorted(name for name in imported if name.startswith(above))
           for module, imported in import_graph().items() if module.startswith(below)}
  assert {module: names for module, names in wrong.items() if names} == {}


def test_the_studies_are_above_the_tasks_and_the_shared_code():
  """Tasks, training, models and the package root's shared modules never import a study: a task's own figures
  use the shared helpers (plots, run_folders, the Workload of training.task). Every study is an entry point."""
  studies = 'lra_posenc.studies'
  graph = import_graph()
  wrong = {module: sorted(name for name in imported if name.startswith(studies))
           for module, imported in graph.items() if not module.startswith(studies)}
  assert {module: names for module, names in wrong.items() if names} == {}
  assert set(task_folders().values()) <= {module.rsplit('.', 1)[0] for module in graph}
  entry_points = [module for module in graph if module.startswith(f'{studies}.')]
  assert len(entry_points) >= 6
  for module in entry_points:
    with open(module_files()[module]) as f:
      assert "if __name__ == '__main__':" in f.read(), module


def test_training_is_at_most_eight_modules_of_one_subject_each():
  """The loop, checkpoints, settings, devices and processes, batches, run files, the command line, the task contract."""
  modules = sorted(name for name in os.listdir(os.path.join(ROOT, PACKAGE, 'training'))
                   if name.endswith('.py') and name != '__init__.py')
  assert len(modules) <= 8, modules


def test_scripts_and_tests_import_the_installed_package_without_editing_sys_path():
  """`pip install -e .` (or pytest.ini's pythonpath) makes the package importable: no file patches sys.path."""
  patching = []
  for folder in ('scripts', 'tests'):
    for name in sorted(os.listdir(os.path.join(ROOT, folder))):
      if name.endswith('.py'):
        with open(os.path.join(ROOT, folder, name)) as f:
          tree = ast.parse(f.read(), name)
        patching += [f'{folder}/{name}:{node.lineno}' for node in ast.walk(tree)
                     if isinstance(node, ast.Attribute) and node.attr == 'path' and isinstance(node.value, ast.Name)
                     and node.value.id == 'sys']
  assert patching == []


def named_tasks(path: str) -> set[str]:
  """The tasks a source file names in code: a string that is a task's name (a comparison, a dict key), one of
  its modules or a command's `--task=NAME`; or an import of its folder. Docstrings are prose and do not count."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  folders = task_folders()
  docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
  in_folder = lambda module, name: module == folders[name] or module.startswith(folders[name] + '.')
  named = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
      named |= {name for name in folders if node.value == name or in_folder(node.value, name)
                or re.search(rf'--task[= ]{name}\b', node.value)}
    elif isinstance(node, ast.Import):
      named |= {name for name in folders for alias in node.names if in_folder(alias.name, name)}
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      named |= {name for name in folders if in_folder(node.module, name)}
  return named


def test_a_task_is_named_only_in_its_own_folder():
  """Registering a task is its folder's `spec` module; nothing outside the folder names it."""
  folders = task_folders()
  naming = {}
  for module, path in module_files().items():
    own = {name for name, folder in folders.items() if module == folder or module.startswith(folder + '.')}
    if module != 'lra_posenc.tasks' and (named := named_tasks(path) - own):
      naming[os.path.relpath(path, ROOT)] = named
  for name in sorted(os.listdir(os.path.join(ROOT, 'scripts'))):
    if name.endswith('.py') and (named := named_tasks(os.path.join(ROOT, 'scripts', name))):
      naming[f'scripts/{name}'] = named
  assert naming == {}


def test_the_naming_check_sees_a_string_an_import_and_not_a_docstring(tmp_path):
  path = tmp_path / 'example.py'
  path.write_text('"""Trains listops."""\nfrom lra_posenc.translation import bleu\nif task == "lm": pass\n'
                  'FLAGS = ["--task=listops"]\n')
  assert named_tasks(str(path)) == {'translation', 'lm', 'listops'}


def test_each_task_is_its_folders_spec_and_the_registry_names_none():
  for name, folder in task_folders().items():
    assert importlib.import_module(f'{folder}.spec').SPEC is TASKS[name]
    assert TASKS[name].name == name
  assert len(TASKS) >= 3
  assert named_tasks(os.path.join(ROOT, PACKAGE, 'tasks.py')) == set()
