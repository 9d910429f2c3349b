"""The course manifest: every stage and every exercise, with its title and points.

This is the one place exercises are declared. The stub generator takes exercise titles
from here, `course status` and `course grade` take points from here, and a course-level
test checks that the solution markers (`# BEGIN SOLUTION 1.3`) and the test markers
(`@pytest.mark.exercise("1.3")`) name exactly the exercises listed here.

Each stage edits only its own block.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Exercise:
    id: str  # "stage.number", e.g. "1.3"
    title: str
    points: int


@dataclass(frozen=True)
class Stage:
    number: str  # "01"
    module: str  # "autograd": NN_<folder>/<module>.py and solutions/<module>.py
    folder: str  # "01_autograd"
    title: str
    exercises: tuple[Exercise, ...] = field(default_factory=tuple)

    @property
    def notebook(self) -> str:
        return f"{self.folder}/{self.folder}.ipynb"


def _ex(*rows: tuple[str, str, int]) -> tuple[Exercise, ...]:
    return tuple(Exercise(i, t, p) for i, t, p in rows)


STAGES: tuple[Stage, ...] = (
    # --- stage 01 -------------------------------------------------------------------
    Stage("01", "autograd", "01_autograd", "A NumPy autograd engine", _ex(
        ("1.1", "Tensor basics and backward", 10),
    )),
    # --- end stage 01 ---------------------------------------------------------------
)


def stage(key: str) -> Stage:
    """Find a stage by number ("1", "01"), module ("autograd") or folder ("01_autograd")."""
    k = str(key).strip().rstrip("/")
    for s in STAGES:
        if k in (s.number, s.module, s.folder) or (k.isdigit() and int(k) == int(s.number)):
            return s
    known = ", ".join(f"{s.number} ({s.module})" for s in STAGES)
    raise KeyError(f"no stage {key!r}; the course has: {known}")


def exercise(ex_id: str) -> Exercise:
    for s in STAGES:
        for e in s.exercises:
            if e.id == ex_id:
                return e
    raise KeyError(f"no exercise {ex_id!r} in the manifest")


def stage_of(ex_id: str) -> Stage:
    for s in STAGES:
        if any(e.id == ex_id for e in s.exercises):
            return s
    raise KeyError(f"no exercise {ex_id!r} in the manifest")
