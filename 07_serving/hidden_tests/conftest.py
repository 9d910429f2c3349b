"""Fixtures of stage 07's hidden tests: the visible tests' own fixtures, imported, not copied.

`../tests/conftest.py` is loaded by path (its folder is no package, and pytest's importlib
mode gives it no importable name); its fixtures are re-exported here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parent.parent / "tests" / "conftest.py"
_spec = importlib.util.spec_from_file_location("_stage07_visible_conftest", _path)
_visible = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_visible)

_single_threaded = _visible._single_threaded
tiny_model = _visible.tiny_model
start = _visible.start
server = _visible.server
http = _visible.http
kit = _visible.kit
