"""Run against the stubs, every exercise test of every stage fails, visible and hidden: a
test that passes on a stub asserts nothing. And the learner sees each unfilled exercise as
one TODO line. The run is the grader's own (`course grade --impl student` of the stage, in its
trusted workspace: tests/helpers.py's `stub_grades`), shared with tests/test_grade.py's
test_stubs_score_zero, which asserts the grade of the same run."""
from __future__ import annotations

import pytest

from course import manifest
from tests.helpers import stage_params, stub_grades


@pytest.mark.parametrize("st", stage_params())
@pytest.mark.timeout(1800)  # the stage's grade: its reference answers and the stub's run
def test_every_exercise_test_fails_on_the_stub(st: manifest.Stage, tmp_path_factory):
    run = stub_grades([st], tmp_path_factory)[st.number].run
    assert not run.errors, f"stage {st.number} did not run cleanly on its stub: {run.errors}"
    ex_results = [r for r in run.in_order() if r.exercise]
    assert ex_results, f"no exercise test of stage {st.number} ran"
    passed = [r.nodeid for r in ex_results if r.outcome == "passed"]
    assert not passed, f"these exercise tests pass on the stub, so they assert nothing: {passed}"
    assert not run.anomalies, run.anomalies
    covered = {r.exercise for r in ex_results if not r.hidden}
    assert covered == {e.id for e in st.exercises}, f"exercises without a test that ran: {covered}"
    # the learner's view: one TODO line per unfilled exercise, not a traceback wall
    todos = [r for r in ex_results if r.todo]
    assert todos, "no failure was reported as a TODO"
    assert "TODO: Exercise" in run.output
    assert "raise NotImplementedError" not in run.output, "a stub's failure was shown as a traceback"
