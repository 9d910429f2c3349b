"""Every stage notebook runs top to bottom under nbval with the reference solutions, and is
committed with its outputs cleared."""
from __future__ import annotations

import json
import sys

import pytest

from course import manifest
from tests.helpers import ROOT, run, stage_params


@pytest.mark.parametrize("st", stage_params())
def test_notebook_is_committed_clean(st: manifest.Stage):
    nb = json.loads((ROOT / st.notebook).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{st.notebook} has outputs; clear them before committing"
            assert cell.get("execution_count") is None


@pytest.mark.parametrize("st", stage_params())
def test_notebook_runs_under_nbval(st: manifest.Stage):
    # tests.nbclaims checks, on the outputs of this same run, that the prose states no figure
    # its checked outputs contradict and that no cell prints object reprs or tqdm warnings
    proc = run([sys.executable, "-m", "pytest", "--nbval-lax", "-q", "-p", "no:cacheprovider",
                "-p", "tests.nbclaims", "--timeout=600", st.notebook], impl="solution", timeout=900)
    assert proc.returncode == 0, f"{st.notebook} failed under nbval:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
