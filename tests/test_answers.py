"""`course.answer`: hidden tests' values as plain data, and the grading parent's comparison."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from course import answers
from course.grading import Reference, judge_answers
from course.results import TestResult


def _wire(value, **kw):
    """A value as the parent receives it: encoded in the test process, through JSON."""
    return json.loads(json.dumps(answers.encode(value, **kw)))


def test_plain_values_survive_the_trip_and_compare_equal():
    for v in (None, True, 3, -2.5, float("nan"), "text", [1, [2.0, "x"]], {"a": (1, 2), "b": None},
              np.arange(6, dtype=np.int32).reshape(2, 3), np.float64(0.25), torch.tensor([1.5, -2.0])):
        assert answers.differs(_wire(v), _wire(v), 0.0, 0.0) is None, v


def test_objects_that_are_not_plain_data_are_refused_in_the_test():
    class Agree:
        def __eq__(self, other):
            return True

    for v in (Agree(), {1: 2}, np.array([Agree()], dtype=object), {"k": Agree()}, 2 ** 70, b"bytes"):
        with pytest.raises(TypeError, match="answer"):
            answers.answer("x", v)
    with pytest.raises(TypeError, match="name"):
        answers.answer("", 1)
    with pytest.raises(TypeError, match="MiB"):
        answers.answer("big", np.zeros(answers.MAX_BYTES // 8 + 1))


def test_an_array_subclass_is_read_as_its_raw_bytes():
    class Liar(np.ndarray):
        def __eq__(self, other):
            return True

        def tobytes(self, *a, **k):
            return b"\0" * self.nbytes

    lie = np.array([1.0, 2.0]).view(Liar)
    assert answers.differs(_wire(np.array([1.0, 2.0])), _wire(lie), 0.0, 0.0) is None
    assert answers.differs(_wire(np.array([1.0, 3.0])), _wire(lie), 0.0, 0.0) is not None


def test_bfloat16_tensors_become_float32_and_gradients_are_detached():
    t = torch.tensor([1.0, 2.0], dtype=torch.bfloat16, requires_grad=True) * 2
    rec = _wire(t)
    assert rec["a"][0] == "<f4" and answers.decode_array(rec["a"]).tolist() == [2.0, 4.0]


@pytest.mark.parametrize("want, got, rtol, atol, problem", [
    (1.0, 1.0 + 1e-9, 1e-6, 0.0, None),
    (1.0, 1.1, 1e-6, 0.0, "differ"),
    (np.zeros(3), np.zeros(4), 1e-6, 0.0, "shape"),
    (np.zeros(3), np.zeros(3, dtype=bool), 1e-6, 0.0, "dtype"),
    (np.array([1, 2]), np.array([1.0, 2.0]), 0.0, 0.0, "dtype"),  # exact ints: floats are not ints
    (np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), 0.0, 0.0, None),
    (np.array([np.nan, 1.0]), np.array([0.0, 1.0]), 1e-6, 1e-6, "differ"),
    (3, 3, 0.0, 0.0, None),
    (3, 4, 0.0, 0.0, "differ"),
    (True, 1, 0.0, 0.0, "dtype"),
    ("a", "b", 0.0, 0.0, "differs"),
    ([1, 2], [1, 2, 3], 0.0, 0.0, "length"),
    ({"a": 1}, {"b": 1}, 0.0, 0.0, "keys"),
    ({"a": [1.0, 2.0]}, {"a": [1.0, 2.5]}, 1e-6, 0.0, "['a'][1]"),
    (None, 0, 0.0, 0.0, "differs"),
    (2.0, np.float32(2.0), 1e-6, 0.0, None),  # a number and a 0-d array compare as numbers
])
def test_the_parents_comparison(want, got, rtol, atol, problem):
    found = answers.differs(_wire(want), _wire(got), rtol, atol)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found, found


def test_malformed_records_never_match_and_never_raise():
    want = _wire(np.arange(3.0))
    for bad in (None, 3, {"a": ["<f8", [3], "not base64!"]}, {"a": ["|O", [1], ""]}, {"a": ["<f8", [4], want["a"][2]]},
                {"l": "x"}, {"v": 1, "l": []}, {"zz": 1}):
        assert answers.differs(want, bad, 1.0, 1.0) is not None, bad


def _hidden(nodeid: str, outcome: str = "passed") -> TestResult:
    return TestResult(f"01_autograd/hidden_tests/test_x.py::{nodeid}", exercise="1.1", outcome=outcome)


def test_judge_uses_the_references_tolerance_and_needs_every_answer():
    ref = Reference(answers={
        _hidden("t1").nodeid: {"g": {"value": _wire([1.0, 2.0]), "rtol": 0.0, "atol": 1e-3}},
        _hidden("t2").nodeid: {"g": {"value": _wire(5), "rtol": 0.0, "atol": 0.0},
                               "h": {"value": _wire("ok"), "rtol": 0.0, "atol": 0.0}},
        _hidden("t3").nodeid: {"g": {"value": _wire(1.0), "rtol": 0.0, "atol": 0.0}},
    })
    results = [_hidden("t1"), _hidden("t2"), _hidden("t3"), _hidden("t4")]
    given = {
        results[0].nodeid: {"g": {"value": _wire([1.0005, 2.0]), "rtol": 1e9, "atol": 1e9}},
        results[1].nodeid: {"g": {"value": _wire(5)}},  # "h" never arrived
        results[2].nodeid: {"g": {"value": _wire(2.0), "rtol": 1e9, "atol": 1e9}},  # its own tolerance: ignored
    }
    judge_answers(results, given, ref)
    assert [r.outcome for r in results] == ["passed", "failed", "failed", "passed"]  # t4: the reference has none
    assert "'h'" in results[1].message and "differ" in results[2].message
