# GENERATED from solutions/server/engine_boot.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""The engine process's first code (given code): load the server package, run its engine.

`EngineProcess` starts a process that runs this file by its path
(`runpy.run_path(..., run_name="__course_engine__")`, with `PACKAGE`, `FOLDER` and `ARGS` in its
globals), not a module by its name: a learner's package is `course_student.server`, a name
that exists only in a process that has loaded the package from its folder (the course's
loader does so in the HTTP process; nothing on `sys.path` holds it). So this file loads the
package from `FOLDER` under that same name, as the loader does, and every object sent to
the engine (a request, a command) unpickles against the same classes on both sides. Then it
runs `engine_process.child_main(*ARGS)`. It imports nothing of the course.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_package(name: str, folder: str) -> ModuleType:
    """The package `name` from `folder`/__init__.py, its files importing each other
    relatively (`name.<file>`); a parent package that cannot be imported by name (the
    learner's `course_student`) is an empty namespace."""
    parent = name.rpartition(".")[0]
    if parent and parent not in sys.modules:
        if importlib.util.find_spec(parent) is not None:
            importlib.import_module(parent)
        else:
            namespace = ModuleType(parent)
            namespace.__path__ = []
            sys.modules[parent] = namespace
    spec = importlib.util.spec_from_file_location(name, Path(folder) / "__init__.py",
                                                  submodule_search_locations=[folder])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before it runs: its files import it, pickle looks it up
    spec.loader.exec_module(module)
    return module


if __name__ == "__course_engine__":
    load_package(PACKAGE, FOLDER)  # noqa: F821 — PACKAGE, FOLDER, ARGS: given by EngineProcess
    importlib.import_module(PACKAGE + ".engine_process").child_main(*ARGS)  # noqa: F821
