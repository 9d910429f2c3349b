"""Fixtures of stage 05's hidden tests: the visible tests' own (`model`, `alone`, `checked`,
`serve_trace`, `assert_alone`, and the one-thread autouse fixture), imported from
`../tests/conftest.py` by path, not copied."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parent.parent / "tests" / "conftest.py"
_spec = importlib.util.spec_from_file_location("_stage05_visible_conftest", _path)
_visible = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_visible)

_single_threaded = _visible._single_threaded
model = _visible.model
alone = _visible.alone
checked = _visible.checked
serve_trace = _visible.serve_trace
assert_alone = _visible.assert_alone
