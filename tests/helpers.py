"""Shared helpers of the course-level tests (the course itself: stubs, notebooks, grading, chain)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from course import manifest
from course.loader import root

ROOT = root()


def existing_stages() -> list[manifest.Stage]:
    """Stages whose solution module exists (the manifest may list planned stages)."""
    return [st for st in manifest.STAGES if (ROOT / "solutions" / f"{st.module}.py").exists()]


def run(cmd: list[str], impl: str = "solution", timeout: int = 900, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, COURSE_IMPL=impl, COURSE_NO_RECORD="1", PYTHONUNBUFFERED="1")
    env.update(kw.pop("env", {}))
    return subprocess.run(cmd, cwd=kw.pop("cwd", ROOT), env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable


def stage_params():
    return [pytest.param(st, id=st.folder) for st in existing_stages()]
