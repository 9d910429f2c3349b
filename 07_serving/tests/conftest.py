"""Shared fixtures of stage 07's tests: real uvicorn servers on 127.0.0.1, ephemeral ports.

- `tiny_model`: `solutions.gpt.random_gpt` (2 layers, width 32, context 128; matrices drawn
  with std 0.5 so that its answers vary with the prompt). Fast: these tests are about the
  server, not about the text.
- `start(**config)`: start a server over a fresh engine of `tiny_model` (a `ServerConfig`
  from the keyword arguments; `step_delay=` slows every engine step down, so that
  requests overlap and deadlines pass on purpose; `gate=` a `threading.Event` that every
  engine step waits for, so that a test decides when requests in flight may finish,
  instead of guessing with a sleep); it is stopped when the test module ends, every gate
  opened first, and the teardown fails if a server or engine thread outlives it.
  Start-up has a short time limit, so a broken stub fails at once, never hangs.
- `wait_until(condition)`: poll a condition until it holds, bounded (a readiness signal,
  never a fixed sleep); fails with a message if the bound passes.
- `server`: one such server shared by a test module, default settings.
- `http(server)`: an httpx client for it. A 500 that says "NotImplementedError: Exercise
  7.x" (a stub raised it inside the server) is re-raised here as that
  NotImplementedError, so the learner sees one TODO line, not an assertion about a 500.

Every load loop in these tests is bounded in count and in time and talks to loopback only.
"""

from __future__ import annotations

import functools
import logging
import re
import ssl
import threading
import time
from types import SimpleNamespace

import httpx
import openai
import pytest

import course
from solutions.gpt import GPT, random_gpt

MODEL = "course-gpt"
CONTEXT = 128


@pytest.fixture(scope="module", autouse=True)
def _single_threaded(one_thread):
    """Every test module here runs on one torch thread (the course plugin's `one_thread`)."""


class _TodoInOneLine(logging.Filter):
    """The server logs an unexpected exception with its traceback; a stub's
    NotImplementedError is no bug of the server: log it as its one TODO line instead, so
    that a failed test's captured log shows no traceback wall."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, NotImplementedError):
            record.msg, record.args = f"{record.getMessage()}: TODO: {exc}", None
            record.exc_info, record.exc_text = None, None
        return True


@pytest.fixture(scope="session", autouse=True)
def _server_log_todos():
    server_log, todo = logging.getLogger("course.server"), _TodoInOneLine()
    server_log.addFilter(todo)
    yield
    server_log.removeFilter(todo)


@pytest.fixture(scope="session")
def tiny_model() -> GPT:
    return random_gpt(CONTEXT)


GATE_TIMEOUT = 30.0  # a gate never opened (a failed test) holds an engine step this long at most


def slow(engine, delay: float = 0.0, gate: threading.Event | None = None):
    """Make every engine step take at least `delay` seconds more (a slower model), and,
    with `gate`, wait (bounded) for the gate to be open before each step."""
    inner = engine.step

    def step():
        if gate is not None:
            gate.wait(GATE_TIMEOUT)
        if delay:
            time.sleep(delay)
        return inner()

    engine.step = step
    return engine


@pytest.fixture(scope="module")
def start(tiny_model):
    handles, gates = [], []

    srv = course.load("server")  # here, not at import: --impl is known only now

    def run(*, step_delay: float = 0.0, max_batch_size: int = 8, model=None, gate=None, num_blocks=None, **config):
        model = model or tiny_model
        # KV memory of max_batch_size whole contexts (the tests' sizes are counted in it),
        # not the server's default of many more
        num_blocks = num_blocks or -(-max_batch_size * model.config.block_size // 16)
        engine = srv.make_engine(model, max_batch_size=max_batch_size, max_tokens_per_step=64, num_blocks=num_blocks)
        if step_delay or gate is not None:
            slow(engine, step_delay, gate)
        if gate is not None:
            gates.append(gate)
        handle = srv.serve_in_thread(engine, None, srv.ServerConfig(**config), start_timeout=60.0)  # reached only when broken (a loaded machine starts slowly)
        handles.append(handle)
        return handle

    yield run
    # Deterministic clean-up: no server thread, engine thread or event loop outlives the
    # module (one left running would answer, log or raise during later tests, or while
    # pytest itself is shutting down).
    # Every server drains at once (in parallel), within one shared bound, so that the
    # teardown stays far from the per-test time limit even when a drain is broken.
    for g in gates:
        g.set()
    for h in handles:
        h.server.request_stop()
    end = time.monotonic() + 10
    alive = []
    for h in handles:
        try:
            h.stop(timeout=max(0.1, end - time.monotonic()))  # forces the exit past the bound
        finally:
            engine_thread = getattr(getattr(h.state, "loop", None), "_thread", None)
            if engine_thread is not None and engine_thread.is_alive():
                engine_thread.join(5)
            alive += [t.name for t in (h.thread, engine_thread) if t is not None and t.is_alive()]
    assert not alive, f"threads still running after the servers were stopped: {alive}"


@pytest.fixture(scope="module")
def server(start):
    return start()


#: A stub's NotImplementedError inside the server becomes a 500 whose message carries it
#: ("internal error: NotImplementedError: Exercise 7.2: ..."; "engine error: ..." when the
#: engine thread met it).
_TODO_500 = re.compile(r"NotImplementedError: (Exercise \d+\.\d+: .*? see \S+\.ipynb)")


def _todo_hook(response: httpx.Response) -> None:
    if response.status_code == 500:
        response.read()
        try:
            message = response.json()["error"]["message"]
        except Exception:
            return
        todo = _TODO_500.search(message)
        if todo:
            raise NotImplementedError(todo.group(1))


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """The `openai` client's view of the same 500 (an `InternalServerError` carrying the
    stub's message) is that NotImplementedError too, raised from it."""
    try:
        return (yield)
    except openai.APIStatusError as e:
        todo = _TODO_500.search(str(e)) if e.status_code == 500 else None
        if todo:
            raise NotImplementedError(todo.group(1)) from e
        raise


@functools.lru_cache(maxsize=None)
def _tls() -> ssl.SSLContext:
    """One TLS context for every test client: httpx builds a fresh one per client otherwise,
    loading the CA bundle each time (42 ms of CPU; 135 clients in a run of this stage's tests),
    though the server is plain HTTP on 127.0.0.1."""
    return ssl.create_default_context()


def client(handle, timeout: float = 10.0, **kw) -> httpx.Client:
    kw.setdefault("verify", _tls())
    return httpx.Client(base_url=handle.url, timeout=timeout, event_hooks={"response": [_todo_hook]}, **kw)


def async_client(handle, timeout: float = 10.0, **kw) -> httpx.AsyncClient:
    async def hook(response):
        if response.status_code == 500:
            await response.aread()
            _todo_hook(response)

    kw.setdefault("verify", _tls())
    return httpx.AsyncClient(base_url=handle.url, timeout=timeout, event_hooks={"response": [hook]}, **kw)


@pytest.fixture
def http(server):
    with client(server) as c:
        yield c


def run_steps(engine, arrivals, limit: int = 5000) -> int:
    """Drive an engine on a fake clock (its `ManualClock`, one tick of 1 s a step): add each
    (step, request) of `arrivals` at its step, step, tick, until every request has finished;
    the steps taken (bounded by `limit`)."""
    pending = sorted(arrivals, key=lambda a: a[0])
    step = 0
    while pending or engine.has_unfinished():
        while pending and pending[0][0] <= step:
            engine.add_request(pending.pop(0)[1])
        if engine.has_unfinished():
            engine.step()
        engine.clock.sleep(1.0)
        step += 1
        assert step < limit, "the engine did not finish the load"
    return step


def wait_until(condition, timeout: float = 30.0, what: str = "the condition", poll: float = 0.01) -> None:
    """Poll `condition()` until it is true; fail (never hang) after `timeout` seconds.
    The bound is generous on purpose: it is reached only when something is broken."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(poll)


def health(handle) -> dict:
    return httpx.get(f"{handle.url}/health", timeout=5).json()


def settle(handle, timeout: float = 30.0) -> dict:
    """Wait (bounded) until the server holds no request at all; return its /health. The
    bound is generous (aborts and clean-up lag behind on a loaded machine); a clean server
    returns at once."""
    end = time.monotonic() + timeout
    while True:
        h = health(handle)
        if (h["running"] == 0 and h["waiting"] == 0 and h["in_flight"] == 0 and h["tracked_requests"] == 0
                and h["reserved_blocks"] == 0) or time.monotonic() > end:
            return h
        time.sleep(0.02)


def assert_clean(handle) -> dict:
    """Nothing leaked: no request running, waiting, tracked or reserved; every block free."""
    h = settle(handle)
    assert h["running"] == 0 and h["waiting"] == 0, h
    assert h["free_blocks"] == h["total_blocks"], f"leaked KV blocks: {h}"
    assert h["tracked_requests"] == 0, f"finished requests left in engine.requests: {h}"
    assert h["in_flight"] == 0 and h["reserved_blocks"] == 0, h
    return h


def sse_events(raw: bytes) -> list[str]:
    """Split an SSE body into its `data:` payloads, checking the framing byte for byte."""
    assert raw.endswith(b"data: [DONE]\n\n"), raw[-80:]
    assert b"\r" not in raw
    parts = raw.split(b"\n\n")
    assert parts[-1] == b""
    out = []
    for p in parts[:-1]:
        assert p.startswith(b"data: ") and b"\n" not in p, p[:80]
        out.append(p[len(b"data: "):].decode("utf-8"))
    return out


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """The helpers above, for test modules (a conftest is not importable by name here)."""
    return SimpleNamespace(client=client, async_client=async_client, health=health, settle=settle,
                           wait_until=wait_until, run_steps=run_steps,
                           assert_clean=assert_clean, sse_events=sse_events, slow=slow, MODEL=MODEL,
                           CONTEXT=CONTEXT)
