"""Stage 07 hidden tests: held-out inputs, sizes and edge cases of every exercise."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import openai
import pytest

import course
from course.loader import root
from solutions.batching import Event, Request, State

srv = course.load("server")
M = "course-gpt"
LIMITS = srv.Limits(context=64, vocab_size=257, max_n=2, max_stop=2, models=("a", "b"))


# ---- 7.1 -------------------------------------------------------------------------------------
_HELD_OUT = [
    ("completion", {"model": "b", "prompt": "x", "n": 3}, 400, "n"),
    ("completion", {"model": "c", "prompt": "x"}, 404, "model"),
    ("completion", {"model": "a", "prompt": "x", "stop": ["1", "2", "3"]}, 400, "stop"),
    ("completion", {"model": "a", "prompt": "x" * 64}, 400, "prompt"),
    ("completion", {"model": "a", "prompt": "x" * 60, "max_tokens": 5}, 400, "max_tokens"),
    ("completion", {"model": "a", "prompt": [1, -2]}, 400, "prompt"),
    ("completion", {"model": "a", "prompt": [1, True]}, 400, "prompt"),
    ("completion", {"model": "a", "prompt": "x", "temperature": float("nan")}, 400, "temperature"),
    ("completion", {"model": "a", "prompt": "x", "top_p": "1"}, 400, "top_p"),
    ("completion", {"model": "a", "prompt": "x", "frequency_penalty": 1.5}, 400, "frequency_penalty"),
    ("completion", {"model": "a", "prompt": "x", "messages": []}, 400, "messages"),
    ("completion", {"model": "a", "prompt": "x", "stream": True, "stream_options": [1]}, 400, "stream_options"),
    ("chat", {"model": "a", "messages": "hi"}, 400, "messages"),
    ("chat", {"model": "a", "messages": [{"role": "user"}]}, 400, "messages[0].content"),
    ("chat", {"model": "a", "messages": [{"role": "user", "content": "x"}, "y"]}, 400, "messages[1]"),
    ("chat", {"model": "a", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "messages[0].content"),
    ("chat", {"model": "a", "messages": [{"role": "user", "content": "x" * 70}]}, 400, "prompt"),
]
_BUDGET = {"n", "max_tokens"}


@pytest.mark.given
@pytest.mark.parametrize("kind,body,status,param",
                         [r for r in _HELD_OUT if r[3] not in _BUDGET and "x" * 64 not in str(r[1])])
def test_parse_request_held_out(kind, body, status, param):
    _held_out(kind, body, status, param)


@pytest.mark.exercise("7.1")
@pytest.mark.parametrize("kind,body,status,param",
                         [r for r in _HELD_OUT if r[3] in _BUDGET or "x" * 64 in str(r[1])])
def test_parse_request_held_out_budget(kind, body, status, param):
    _held_out(kind, body, status, param)


def _held_out(kind, body, status, param):
    with pytest.raises(srv.APIError) as err:
        srv.parse_request(body, kind, LIMITS)
    assert (err.value.status, err.value.param) == (status, param), err.value.message


@pytest.mark.exercise("7.1")
def test_parse_request_second_model_and_token_prompt():
    g = srv.parse_request({"model": "b", "prompt": [[3, 4]], "max_tokens": 62, "top_p": 1}, "completion", LIMITS)
    assert g.model == "b" and g.prompt_ids == (3, 4) and g.max_tokens == 62 and g.top_p is None


# ---- 7.2 -------------------------------------------------------------------------------------
@pytest.mark.exercise("7.2")
def test_admission_with_forks_and_block_size_8():
    a = srv.AdmissionControl(num_blocks=20, block_size=8, max_queue_tokens=16)
    t = a.admit(17, 7, n=4)  # 2 shared + 4 x 1 = 6 blocks
    assert t.blocks == 6 and a.reserved_blocks == 6
    a.admit(17, 7, n=4)
    a.admit(17, 7, n=4)
    with pytest.raises(srv.APIError) as err:
        a.admit(17, 7, n=4)  # 24 > 22
    assert err.value.status == 503
    a.release(t)
    a.admit(17, 7, n=4)
    assert a.admitted == 4 and a.rejected == 1


@pytest.mark.exercise("7.2")
def test_admission_is_thread_safe():
    import threading

    a = srv.AdmissionControl(num_blocks=1000, block_size=1, max_queue_tokens=0)
    got, errors = [], []

    def worker():
        try:
            for _ in range(200):
                try:
                    got.append(a.admit(1, 1))
                except srv.APIError:
                    pass
        except BaseException as e:  # re-raised in the test's thread
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    if errors:
        raise errors[0]
    assert len(got) == 500 and a.reserved_blocks == 1000
    for t in got:
        a.release(t)
    assert a.reserved_blocks == 0


# ---- 7.3 -------------------------------------------------------------------------------------
@pytest.mark.exercise("7.3")
def test_deadline_reason_first_token_wins_over_total():
    r = Request([1], 3, request_id="d")
    r.arrival = 0.0
    r.events = [Event(0.0, State.WAITING)]
    assert srv.deadline_reason(r, 5.0, first_token_s=1.0, total_s=2.0) == "first_token"
    assert srv.deadline_reason(r, 5.0, first_token_s=10.0, total_s=2.0) == "total"


@pytest.mark.exercise("7.3")
def test_chat_stream_deadline_event(start, kit):
    h = start(step_delay=0.02, timeout_s=0.25)
    with kit.client(h) as c:
        with c.stream("POST", "/v1/chat/completions", json={
                "model": M, "messages": [{"role": "user", "content": "x"}], "max_tokens": 80, "stream": True,
                "temperature": 0}) as r:
            events = kit.sse_events(r.read())
    assert json.loads(events[-2])["error"]["code"] == "deadline_total"
    kit.assert_clean(h)


# ---- 7.4 -------------------------------------------------------------------------------------
@pytest.mark.exercise("7.4")
def test_chat_disconnects_with_n_2_free_everything(start, kit):
    h = start(step_delay=0.02, max_queue_tokens=1 << 20)  # 100 tokens >= 2 s: longer than any lag in seeing a client leave

    async def one(c, i):
        body = {"model": M, "messages": [{"role": "user", "content": f"c{i}"}], "max_tokens": 100, "n": 2,
                "temperature": 0, "stream": True}  # greedy: none of these 20 stops before 100 tokens
        async with c.stream("POST", "/v1/chat/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {") and '"role"' not in line:  # past the role chunk
                    return True
        return False

    async def main():
        async with kit.async_client(h, timeout=20, limits=httpx.Limits(max_connections=20)) as c:
            return await asyncio.wait_for(asyncio.gather(*(one(c, i) for i in range(20))), 30)

    outcomes = asyncio.run(main())
    assert all(outcomes), outcomes
    kit.assert_clean(h)
    lines = h.state.finished_lines
    assert len(lines) == 40 and all(ln["finish_reason"] == "abort" for ln in lines)


# ---- 7.5 -------------------------------------------------------------------------------------
@pytest.mark.exercise("7.5")
def test_token_stream_from_many_threads_keeps_each_threads_order():
    import threading

    async def main():
        s = srv.TokenStream(asyncio.get_running_loop())
        errors = []

        def produce(k):
            try:
                [s.put(("delta", k, str(i))) for i in range(300)]
            except BaseException as e:
                errors.append(e)

        ts = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        if errors:
            raise errors[0]
        got = []
        while len(got) < 1200:
            got += await asyncio.wait_for(s.get_batch(), 5)
        for k in range(4):
            assert [e[2] for e in got if e[1] == k] == [str(i) for i in range(300)]

    asyncio.run(main())


@pytest.mark.exercise("7.5")
def test_completion_sse_framing_with_n_2(server, kit):
    with kit.client(server) as c:
        with c.stream("POST", "/v1/completions", json={"model": M, "prompt": "ab", "max_tokens": 4, "n": 2,
                                                        "temperature": 0.5, "seed": 1, "stream": True}) as r:
            events = kit.sse_events(r.read())
    objs = [json.loads(e) for e in events[:-1]]
    assert all(o["object"] == "text_completion" and "usage" not in o for o in objs)
    finish = {o["choices"][0]["index"]: o["choices"][0]["finish_reason"] for o in objs
              if o["choices"][0]["finish_reason"]}
    assert sorted(finish) == [0, 1]


# ---- 7.6 -------------------------------------------------------------------------------------
@pytest.mark.exercise("7.6")
def test_request_log_uses_prefix_hits_when_the_engine_has_them():
    r = Request([1, 2, 3, 4], 2, request_id="p")
    r.arrival = 0.0
    r.events = [Event(0.0, State.WAITING), Event(0.5, State.RUNNING), Event(1.0, State.FINISHED, "length")]
    r.state, r.finish_reason, r.output, r.token_times = State.FINISHED, "length", [1, 2], [0.75, 1.0]
    r.num_cached_tokens = 3
    line = srv.request_log(r)
    assert line["prefix_hit_tokens"] == 3 and line["mean_tpot_s"] == pytest.approx(0.25)
    assert list(line) == list(srv.LOG_KEYS)


@pytest.mark.exercise("7.6")
def test_metrics_count_aborted_requests(start, kit):
    h = start(step_delay=0.01, timeout_s=0.15)
    with kit.client(h) as c:
        assert c.post("/v1/completions", json={"model": M, "prompt": "z", "max_tokens": 100,
                                                 "temperature": 0}).status_code == 504
    kit.assert_clean(h)
    m = h.state.metrics.registry.get_sample_value
    assert m("vllm:request_success_total", {"model_name": M, "finished_reason": "abort"}) == 1


# ---- 7.7 -------------------------------------------------------------------------------------
def _wait_until(condition, timeout: float, what: str) -> None:
    """Poll `condition()` until true; fail after `timeout` s (reached only if something is broken)."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.01)


@pytest.mark.exercise("7.7")
def test_cli_sigterm_with_a_stream_in_flight_exits_0(tmp_path):
    """The real process: SIGTERM while a request streams; the stream completes, a newcomer
    meanwhile gets 503, and the process exits 0."""
    import re
    import threading

    # Port 0: the OS picks a free port at bind time (no pick-then-bind race with other
    # processes); uvicorn logs the port it got once the server accepts connections, which is
    # the readiness signal. The output goes to a file, never to a pipe nobody reads.
    code = ("import sys, course; sys.exit(course.load('server').main(['--port', '0', '--grace', '30', "
            "'--max-batch-size', '1', '--max-queue-tokens', '4096']))")  # one row: the requests in flight run one after another
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=root(), stdout=log_file, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONPATH=str(root()), PYTHONUNBUFFERED="1"))

    def output() -> str:
        return log_path.read_text(errors="replace")

    try:
        running = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
        _wait_until(lambda: running.search(output()) or proc.poll() is not None, 50, "the server to come up")
        assert proc.poll() is None, f"the server exited with {proc.returncode}: {output()[-2000:]}"
        url = f"http://127.0.0.1:{running.search(output()).group(1)}"

        oai = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
        stream = oai.completions.create(model=M, prompt="def f():", max_tokens=200, temperature=0, stream=True)
        it = iter(stream)
        next(it)
        queued, errors = [], []

        def wait_for_answer():
            try:
                queued.append(oai.completions.create(model=M, prompt="class A:", max_tokens=200, temperature=0))
            except BaseException as e:  # re-raised in the test's thread
                errors.append(e)

        waiters = [threading.Thread(target=wait_for_answer) for _ in range(2)]
        [t.start() for t in waiters]

        def health() -> dict:
            return httpx.get(f"{url}/health", timeout=30).json()  # a body with the counts, even when 503

        _wait_until(lambda: health()["admitted"] >= 3 or errors, 60, "the three requests to be admitted")
        if errors:
            raise errors[0]
        proc.send_signal(signal.SIGTERM)
        # the drain has begun once /health says so (the handler runs on the server's next tick)
        _wait_until(lambda: health()["status"] == "draining" or proc.poll() is not None, 30, "the drain to begin")
        late = httpx.post(f"{url}/v1/completions", json={"model": M, "prompt": "x", "max_tokens": 1}, timeout=30)
        rest = list(it)
        [t.join(90) for t in waiters]
        if errors:
            raise errors[0]
        assert late.status_code == 503, late.text
        assert rest[-1].choices[0].finish_reason in ("stop", "length")
        assert len(queued) == 2 and all(r.choices[0].finish_reason in ("stop", "length") for r in queued), \
            "requests admitted before the signal must be answered"
        assert proc.wait(60) == 0, output()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.exercise("7.7")
def test_drain_with_nothing_in_flight_returns_at_once(start, kit):
    h = start(shutdown_grace_s=30)
    t0 = time.monotonic()
    assert h.stop(20) == 0
    assert time.monotonic() - t0 < 5
