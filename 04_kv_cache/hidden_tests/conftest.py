"""Fixtures of stage 04's hidden tests: the visible tests' own (`tiny`, `trained`, and the
one-thread autouse fixture), imported from `../tests/conftest.py` by path, not copied."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parent.parent / "tests" / "conftest.py"
_spec = importlib.util.spec_from_file_location("_stage04_visible_conftest", _path)
_visible = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_visible)

_single_threaded = _visible._single_threaded
tiny = _visible.tiny
trained = _visible.trained
