"""The command line's entry point (given). Two ways in:

    python -m solutions.train --preset tiny                        # the package, by name
    torchrun --standalone --nproc_per_node 2 -m solutions.train --preset tiny --data DIR
    torchrun --standalone --nproc_per_node 2 03_training_loop/train --preset tiny --data DIR

The last runs this folder by path (the learner's package has no importable name): this file
then imports the folder as a package first, so that its relative imports work.
"""

import os
import sys

if __name__ == "__main__":  # run by path, this is the first code to run: before torch loads
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # why: see omp_env.py


def _import_this_folder():
    """This folder as a package: `solutions.<name>` for the reference (importable by name),
    else `course_student.<name>`, the name `course.load` gives the learner's package."""
    import importlib
    import importlib.util
    import types
    from pathlib import Path

    here = Path(__file__).resolve().parent
    # the folder's files are the package's modules, not top-level ones (`import config`)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    if (here.parent / "__init__.py").is_file():
        sys.path.insert(0, str(here.parent.parent))
        return importlib.import_module(f"{here.parent.name}.{here.name}")
    if "course_student" not in sys.modules:
        namespace = types.ModuleType("course_student")
        namespace.__path__ = []
        sys.modules["course_student"] = namespace
    name = f"course_student.{here.name}"
    spec = importlib.util.spec_from_file_location(name, here / "__init__.py", submodule_search_locations=[str(here)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before it runs: dataclasses look their module up
    spec.loader.exec_module(module)
    return module


if __package__:  # python -m solutions.train: the package is imported already
    from .cli import main
else:  # run by path: `python 03_training_loop/train`, `torchrun ... 03_training_loop/train/__main__.py`
    main = sys.modules[_import_this_folder().__name__ + ".cli"].main

if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # A rank of a torchrun job leaves without interpreter finalisation. Gloo's worker
        # threads release a collective's tensors a moment after the collective returns; when
        # that happens while Python is finalising, the release needs the GIL of a dying
        # interpreter and the process aborts (SIGABRT, "terminate called without an active
        # exception") after all its work is done. The race is described in pytorch/pytorch
        # PR #179291 (closed unmerged). Everything is written (atomically) by now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)
