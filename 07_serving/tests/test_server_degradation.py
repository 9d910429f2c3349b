"""Degradation before refusal (given code, admission.py's `granted_max_tokens` and `degrade`):
once the KV reservations would pass a watermark of the memory, a new request is shortened to
a stated `max_tokens` and told so in its `X-Degraded` header, and only a request that is
still too big shortened gets the 503. (The goodput it buys under 2x saturation: bench.py.)"""

from __future__ import annotations

import pytest

import course

srv = course.load("server")
M = "course-gpt"


def _control(**kw) -> srv.AdmissionControl:
    """10 blocks of 16 tokens, no queue beyond them, degraded past half the memory to 8 tokens."""
    return srv.AdmissionControl(num_blocks=10, block_size=16, max_queue_tokens=0,
                                **{"degrade_watermark": 0.5, "degraded_max_tokens": 8, **kw})


@pytest.mark.given
def test_past_the_watermark_a_request_is_shortened_to_the_floor():
    a = _control()
    assert a.granted_max_tokens([8], 56) == 56, "4 of 10 blocks: under the watermark (5)"
    a.reserved_blocks = 1
    assert a.granted_max_tokens([8], 56) == 56, "1 + 4 = 5 blocks: at the watermark is not past it"
    a.reserved_blocks = 2
    assert a.granted_max_tokens([8], 56) == 8, "2 + 4 blocks pass the watermark: the floor"
    a.reserved_blocks = 6
    assert a.granted_max_tokens([8], 5) == 5, "past the watermark, asking for less than the floor: what it asked"
    a.reserved_blocks = 2
    assert a.granted_max_tokens([8], 56, min_tokens=20) == 20, "never fewer than its own min_tokens"
    a.reserved_blocks = 0
    assert a.granted_max_tokens([8], 40) == 40 and a.granted_max_tokens([8, 8], 40) == 8, \
        "every prompt of the request counts: one's 3 blocks fit, two's 6 do not"
    assert a.granted_max_tokens([8], 40, n=2) == 8, "each of n sequences holds its own answer: 2 x 3 blocks"
    assert _control(degrade_watermark=None).granted_max_tokens([8], 10_000) == 10_000, "no watermark: never"
    for bad in (0, 1.5, -0.1, float("nan"), "0.8"):
        with pytest.raises(ValueError, match="degrade_watermark"):
            _control(degrade_watermark=bad)
    with pytest.raises(ValueError, match="degraded_max_tokens"):
        _control(degraded_max_tokens=0)


@pytest.mark.given
def test_degrade_says_what_it_did():
    a = _control()
    gen = srv.GenerationRequest(kind="completion", model=M, prompt_ids=tuple(range(8)), max_tokens=56)
    assert srv.degrade(a, gen) == (gen, {}), "under the watermark: the request as it came, no header"
    a.reserved_blocks = 6
    shorter, headers = srv.degrade(a, gen)
    assert shorter.max_tokens == 8 and shorter.prompt_ids == gen.prompt_ids and shorter.kind == gen.kind
    assert headers == {"X-Degraded": "max_tokens=8; asked=56; watermark=0.5"}, headers


@pytest.mark.exercise("7.2")
def test_a_request_is_shortened_before_it_is_refused():
    """Memory 10 blocks, no queue: with 4 reserved, a request of 7 blocks as asked is a 503
    without degradation and admitted shortened (1 block) with it; the memory then fills to
    exactly full, and a request too big even shortened is refused as before."""
    plain, a = _control(degrade_watermark=None), _control()
    for c in (plain, a):
        c.admit_batch([8], 56)
    with pytest.raises(srv.APIError) as e:
        plain.admit_batch([8], plain.granted_max_tokens([8], 100))
    assert (e.value.status, e.value.code) == (503, "overloaded")
    granted = a.granted_max_tokens([8], 100)
    assert granted == 8 and a.admit_batch([8], granted).blocks == 1 and a.reserved_blocks == 5
    assert a.rejected == 0, "a shortened request is admitted, not refused"
    for _ in range(5):
        a.admit_batch([8], a.granted_max_tokens([8], 100))
    assert a.reserved_blocks == 10, "exactly full admits"
    with pytest.raises(srv.APIError) as e:
        a.admit_batch([8], a.granted_max_tokens([8], 100))
    assert (e.value.status, e.value.code, a.rejected) == (503, "overloaded", 1)


@pytest.mark.exercise("7.2")
def test_a_degraded_answer_is_shorter_and_its_header_says_so(start, kit):
    """Over HTTP, streamed or not: past the watermark a request asking for 40 tokens gets 3,
    `finish_reason` "length" and the `X-Degraded` header; under it, what it asked and no header."""
    h = start(degrade_watermark=0.5, degraded_max_tokens=3)
    body = {"model": M, "prompt": "def f(x):", "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    with kit.client(h) as c:
        r = c.post("/v1/completions", json={**body, "max_tokens": 5})
        assert r.status_code == 200 and "X-Degraded" not in r.headers, r.headers
        assert r.json()["usage"]["completion_tokens"] == 5
        admission = h.state.admission
        held = admission.admit_batch([16], 16 * (admission.num_blocks // 2))  # half the memory, and a block more
        try:
            r = c.post("/v1/completions", json=body)
            assert r.status_code == 200 and r.headers.get("X-Degraded") == "max_tokens=3; asked=40; watermark=0.5"
            assert r.json()["usage"]["completion_tokens"] == 3 and r.json()["choices"][0]["finish_reason"] == "length"
            r = c.post("/v1/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}})
            assert r.status_code == 200 and r.headers.get("X-Degraded", "").startswith("max_tokens=3;"), r.headers
            assert '"completion_tokens":3' in r.text.replace(" ", ""), r.text[-500:]
        finally:
            admission.served(held)
    kit.assert_clean(h)


@pytest.mark.given
@pytest.mark.parametrize("args", [["--degrade-watermark", "0"], ["--degrade-watermark", "1.5"],
                                  ["--degraded-max-tokens", "0"]])
def test_degradation_options_out_of_range_exit_2_naming_them(args, capsys):
    assert srv.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and args[0] in err and "Traceback" not in err
