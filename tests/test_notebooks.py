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
                "-p", "tests.nbclaims", "--timeout=600", st.notebook], impl="solution", timeout=900,
               env={"COURSE_NB_CHECKS": "skip"})  # the exercises' tests run on their own elsewhere
    assert proc.returncode == 0, f"{st.notebook} failed under nbval:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"


def _execute(nb_path, root, impl: str, monkeypatch, timeout: int = 600) -> list[tuple[str, str]]:
    """Run a notebook top to bottom in a fresh kernel; [(cell source, its text output)].
    Raises nbclient's CellExecutionError for a cell that fails."""
    import nbclient
    import nbformat

    monkeypatch.setenv("COURSE_IMPL", impl)
    monkeypatch.setenv("COURSE_ROOT", str(root))
    monkeypatch.setenv("COURSE_NB_CHECKS", "skip")
    monkeypatch.setenv("COURSE_NO_RECORD", "1")
    nb = nbformat.read(str(nb_path), as_version=4)
    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(root)}}).execute()
    out = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
            out.append((cell.source, text))
    return out


@pytest.mark.parametrize("st", stage_params())
def test_notebook_runs_on_the_untouched_stub(st: manifest.Stage, monkeypatch):
    """A learner opens the lesson before writing anything: every cell completes, and a cell
    that needs an exercise says so in one line (`⏸ this cell needs exercise N.M ...`)."""
    from course.notebook import PAUSE

    cells = _execute(ROOT / st.notebook, ROOT, "student", monkeypatch)
    paused = [src for src, text in cells if PAUSE in text]
    assert paused, f"{st.notebook}: no cell paused on the stub (does it call course.lesson?)"
    for src, text in cells:
        assert "Traceback" not in text and text.count(PAUSE) <= 1, (src[:200], text[-500:])


STAGE01_PARTIAL = (("1.1",), ("1.1", "1.2", "1.3", "1.4"))  # a learner partway through stage 01


def _run_partway(st, solved, tmp_path, monkeypatch):
    """The stage's notebook run with exercises `solved` written (the reference's regions) and
    the rest holes, in a copy of its folder: [(cell source, its output)]."""
    import shutil

    from course import stubs

    shutil.copytree(ROOT / st.folder, tmp_path / st.folder,
                    ignore=shutil.ignore_patterns("__pycache__", st.module, "hidden_tests", "tests"))
    (tmp_path / st.folder / "tests").mkdir()
    stubs.write_partial(st, tmp_path / st.folder / st.module, set(solved))
    return _execute(tmp_path / st.notebook, tmp_path, "student", monkeypatch)


@pytest.mark.parametrize("solved", STAGE01_PARTIAL, ids=lambda s: f"through-{s[-1]}")
def test_stage01_notebook_runs_partway_through(solved, tmp_path, monkeypatch):
    """With exercises up to 1.k written and the rest holes, the lesson still runs top to
    bottom; the cells of the written exercises run (no pause names them), and the first
    cell that needs a later one pauses on it."""
    from course.notebook import PAUSE

    st = manifest.stage("01")
    cells = _run_partway(st, solved, tmp_path, monkeypatch)
    pauses = [text for _, text in cells if PAUSE in text]
    for text in pauses:
        assert not any(f"exercise {ex} " in text for ex in solved), text
    nxt = st.exercises[len(solved)].id
    assert any(f"exercise {nxt} " in text for text in pauses), pauses[:3]


def test_stage06_notebook_runs_partway_through(tmp_path, monkeypatch):
    """Stage 06 with exercises 6.1-6.4 written (allocator, block tables, cache, PyTorch
    attention) and 6.5-6.9 holes: the lesson runs top to bottom, no pause names a written
    exercise, and the Triton section is the first to pause (on 6.5)."""
    from course.notebook import PAUSE

    solved = ("6.1", "6.2", "6.3", "6.4")
    cells = _run_partway(manifest.stage("06"), solved, tmp_path, monkeypatch)
    pauses = [text for _, text in cells if PAUSE in text]
    for src, text in cells:
        assert "Traceback" not in text and text.count(PAUSE) <= 1, (src[:200], text[-500:])
    for text in pauses:
        assert not any(f"exercise {ex} " in text for ex in solved), text
    assert pauses and "exercise 6.5 " in pauses[0], pauses[:3]


def test_a_check_cell_prints_one_line(capsys, monkeypatch):
    """`course.check("1.1")` in a lesson: one line, done on the reference, TODO on the stub."""
    import course
    from course import loader

    monkeypatch.setattr(loader, "_forced_impl", None)  # `make test` passes --impl solution
    monkeypatch.delenv("COURSE_NB_CHECKS", raising=False)
    monkeypatch.setenv("COURSE_NO_RECORD", "1")
    ex = manifest.exercise("1.1")
    for impl, want in (("solution", f"✔ 1.1 {ex.title}: done"), ("student", f"· 1.1 {ex.title}: TODO")):
        monkeypatch.setenv("COURSE_IMPL", impl)
        course.check("1.1")
        lines = capsys.readouterr().out.splitlines()
        assert lines == [want], lines
