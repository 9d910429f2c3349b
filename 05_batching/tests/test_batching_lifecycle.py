"""Exercise 5.1: the request state machine, its timestamps, and how a request ends."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course

b = course.load("batching")
S = b.State

# The oracle, written out independently of the module's table: (from, to) -> allowed reasons.
LEGAL = {
    ("waiting", "running"): {None},
    ("running", "preempted"): {None},
    ("preempted", "waiting"): {None},
    ("running", "finished"): {"stop", "length", "abort"},
    ("waiting", "finished"): {"abort"},
    ("preempted", "finished"): {"abort"},
}


def fresh(t0: float = 0.0) -> "b.Request":
    r = b.Request([1, 2, 3], 4, request_id="r")
    r.events.append(b.Event(t0, S.WAITING))  # what Engine.add_request records
    return r


@pytest.mark.exercise("5.1")
def test_a_full_lifecycle_is_timestamped():
    r = fresh(0.0)
    path = [(S.RUNNING, 1.0, None), (S.PREEMPTED, 2.0, None), (S.WAITING, 2.0, None), (S.RUNNING, 3.5, None),
            (S.FINISHED, 4.0, "length")]
    for to, t, reason in path:
        r.transition(to, t, reason)
        assert r.state is to
    assert [(e.state, e.time, e.reason) for e in r.events] == [(S.WAITING, 0.0, None)] + path
    assert r.finish_reason == "length" and r.finished


@pytest.mark.exercise("5.1")
@pytest.mark.parametrize("path", [
    [(S.FINISHED, "stop")],                              # a waiting request cannot generate
    [(S.PREEMPTED, None)],                               # nor be preempted
    [(S.RUNNING, None), (S.WAITING, None)],              # running goes back only through PREEMPTED
    [(S.RUNNING, None), (S.RUNNING, None)],
    [(S.RUNNING, None), (S.FINISHED, None)],             # finishing needs a reason
    [(S.RUNNING, None), (S.FINISHED, "bored")],
    [(S.RUNNING, "stop")],                               # other moves take none
    [(S.RUNNING, None), (S.PREEMPTED, None), (S.RUNNING, None)],
    [(S.RUNNING, None), (S.FINISHED, "stop"), (S.RUNNING, None)],  # finished is final
    [(S.FINISHED, "abort"), (S.FINISHED, "abort")],
])
def test_illegal_transitions_raise(path):
    r = fresh()
    *ok, (to, reason) = path
    for t, (s, why) in enumerate(ok, 1):
        r.transition(s, float(t), why)
    state, n_events = r.state, len(r.events)
    with pytest.raises(b.IllegalTransition, match=r"request r"):
        r.transition(to, 99.0, reason)
    assert r.state is state and len(r.events) == n_events, "a refused transition must change nothing"


@pytest.mark.exercise("5.1")
def test_time_cannot_run_backwards():
    r = fresh(5.0)
    with pytest.raises(b.IllegalTransition):
        r.transition(S.RUNNING, 4.0)
    assert r.state is S.WAITING and len(r.events) == 1, (
        "a move refused for its time must change nothing: check everything before changing state or events")
    r.transition(S.RUNNING, 5.0)  # the same instant is fine


@pytest.mark.exercise("5.1")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["waiting", "running", "preempted", "finished"]),
                          st.sampled_from([None, "stop", "length", "abort", "oops"])), max_size=12))
def test_random_walks_follow_the_state_machine(moves):
    r = fresh()
    for t, (to, reason) in enumerate(moves, 1):
        legal = reason in LEGAL.get((r.state.value, to), set())
        if legal:
            r.transition(S(to), float(t), reason)
            assert r.state.value == to and r.events[-1] == b.Event(float(t), S(to), reason)
        else:
            with pytest.raises(b.IllegalTransition):
                r.transition(S(to), float(t), reason)
    assert [e.time for e in r.events] == sorted(e.time for e in r.events)


@pytest.mark.exercise("5.1")
def test_append_token_ends_by_length_or_stop():
    r = b.Request([1], 3, stop=[7])
    assert r.append_token(5, 1.0) is None
    assert r.append_token(6, 2.0) is None
    assert r.append_token(8, 3.0) == "length"
    assert r.output == [5, 6, 8] and r.token_times == [1.0, 2.0, 3.0]
    r = b.Request([1], 3, stop=[7])
    assert r.append_token(5, 1.0) is None
    assert r.append_token(7, 2.0) == "stop"
    assert r.output == [5] and r.token_times == [1.0], "the stop token is not part of the output"


@pytest.mark.exercise("5.1")
def test_phase_and_pending_follow_the_tokens():
    r = b.Request([1, 2, 3, 4], 5)
    assert r.phase == "prefill" and r.num_pending == 4
    r.num_computed = 4
    r.append_token(9, 0.0)
    assert r.phase == "decode" and r.num_pending == 1 and r.tokens == [1, 2, 3, 4, 9]


@pytest.mark.given
@pytest.mark.parametrize("kw, match", [
    (dict(prompt=[]), "prompt"), (dict(prompt="abc"), "prompt"), (dict(prompt=[1, -2]), "prompt"),
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(max_new_tokens=2.5), "max_new_tokens"),
    (dict(stop=["x"]), "stop"), (dict(priority="high"), "priority"),
])
def test_bad_requests_are_clear_errors(kw, match):
    args = dict(prompt=[1, 2], max_new_tokens=3) | kw
    with pytest.raises(ValueError, match=match):
        b.Request(args.pop("prompt"), **args)


@pytest.mark.given
@pytest.mark.parametrize("kw", [dict(temperature=-1.0), dict(top_k=0), dict(top_p=0.0), dict(top_p=1.5),
                                dict(seed="x")])
def test_bad_sampling_params_are_clear_errors(kw):
    with pytest.raises(ValueError):
        b.SamplingParams(**kw)
