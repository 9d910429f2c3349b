"""Fixtures of stage 06's hidden tests: the visible tests' own fixtures and checks,
imported from `../tests/conftest.py` by path (its folder is no package), not copied."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parent.parent / "tests" / "conftest.py"
_spec = importlib.util.spec_from_file_location("_stage06_visible_conftest", _path)
_visible = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_visible)

_single_threaded = _visible._single_threaded
model = _visible.model
alone = _visible.alone
serve = _visible.serve
contiguous = _visible.contiguous
check_paged = _visible.check_paged
