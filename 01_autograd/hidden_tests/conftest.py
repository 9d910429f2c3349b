"""Fixtures of stage 01's hidden tests: the visible tests' own checks, imported, not copied.

`torch_check` and `fd_check` come from `../tests/conftest.py`, loaded by path (its folder is
no package, and pytest's importlib mode gives it no importable name).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parent.parent / "tests" / "conftest.py"
_spec = importlib.util.spec_from_file_location("_stage01_visible_conftest", _path)
_visible = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_visible)

torch_check = _visible.torch_check
fd_check = _visible.fd_check
