"""End to end: `course demo` runs every stage of the reference stack in one process."""
from __future__ import annotations

import sys

from tests.helpers import existing_stages, run


def test_course_demo_runs_every_stage():
    proc = run([sys.executable, "-m", "course", "demo"], timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for st in existing_stages():
        assert f"=== Stage {st.number}" in proc.stdout
        assert f"--- stage {st.number} demo took" in proc.stdout
    assert f"{len(existing_stages())} stage(s) ran" in proc.stdout
