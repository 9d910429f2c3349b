"""Shared helpers of the course-level tests (the course itself: stubs, notebooks, grading, chain)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course import layout, manifest
from course.loader import root

ROOT = root()


def existing_stages() -> list[manifest.Stage]:
    """Stages whose solution package exists (the manifest may list planned stages)."""
    return [st for st in manifest.STAGES if layout.has_solution(st)]


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


SECRET = "held-out case 7f3a9c: broadcasting a row against a column"

VISIBLE = '''
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import course

ag = course.load("autograd")


@pytest.mark.exercise("1.1")
def test_rt_backward():
    a = ag.Tensor(np.arange(3.0), requires_grad=True)
    a.backward(np.ones(3))
    np.testing.assert_allclose(a.grad, np.ones(3))


@pytest.mark.exercise("1.2")
def test_rt_add():
    a = ag.Tensor(np.arange(3.0))
    np.testing.assert_allclose((a + a).data, [0.0, 2.0, 4.0])


@pytest.mark.exercise("1.3")
def test_rt_sum():
    assert ag.Tensor(np.ones((2, 3))).sum().item() == 6.0


@pytest.mark.exercise("1.4")
def test_rt_matmul():
    a = ag.Tensor(np.eye(2))
    np.testing.assert_allclose((a @ a).data, np.eye(2))


@pytest.mark.exercise("1.5")
def test_rt_reshape():
    assert ag.Tensor(np.arange(6.0)).reshape(2, 3).shape == (2, 3)


@pytest.mark.exercise("1.6")
@settings(max_examples=30, deadline=None, database=None)
@given(st.floats(-5, 5))
def test_rt_relu(x):
    assert ag.Tensor(np.array([x])).relu().item() == max(x, 0.0)
'''

HIDDEN = f'''
import numpy as np
import pytest

import course

SECRET = "{SECRET}"


@pytest.mark.exercise("1.2")
def test_rt_hidden_broadcast():
    ag = course.load("autograd")
    out = ag.Tensor(np.ones((1, 3))) + ag.Tensor(np.arange(2.0).reshape(2, 1))
    course.answer("sum", out.data)
    assert out.shape == (2, 3), SECRET
    np.testing.assert_allclose(out.data, [[1.0] * 3, [2.0] * 3])
'''


def small_course(base: Path) -> Path:
    """A small instructor's course under `base`: the real solutions, stage 01's stub, a few
    quick numpy tests (one a Hypothesis test) and one hidden test. Grading it takes seconds."""
    base.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "pyproject.toml", base / "pyproject.toml")
    shutil.copytree(ROOT / "solutions", base / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
    (base / "01_autograd" / "tests").mkdir(parents=True)
    (base / "01_autograd" / "hidden_tests").mkdir()
    shutil.copytree(ROOT / "01_autograd" / "autograd", base / "01_autograd" / "autograd",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "01_autograd" / "hints.json", base / "01_autograd" / "hints.json")
    (base / "01_autograd" / "tests" / "test_autograd_rt.py").write_text(VISIBLE)
    (base / "01_autograd" / "hidden_tests" / "test_autograd_rt_hidden.py").write_text(HIDDEN)
    return base
