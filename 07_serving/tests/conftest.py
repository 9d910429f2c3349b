"""Shared fixtures of stage 07's tests: real uvicorn servers on 127.0.0.1, ephemeral ports.

- `tiny_model`: a small random GPT (2 layers, width 32, context 128; matrices drawn with
  std 0.5 so that its answers vary with the prompt). Fast: these tests are about the
  server, not about the text.
- `start(**config)`: start a server over a fresh engine of `tiny_model` (a `ServerConfig`
  from the keyword arguments; `step_delay=` slows every engine step down, so that
  requests overlap and deadlines pass on purpose); it is stopped when the test module
  ends. Start-up has a short time limit, so a broken stub fails at once, never hangs.
- `server`: one such server shared by a test module, default settings.
- `http(server)`: an httpx client for it. A 500 that says "TODO: Exercise 7.x" (a stub
  raised NotImplementedError inside the server) is re-raised here as that
  NotImplementedError, so the learner sees one TODO line, not an assertion about a 500.

Every load loop in these tests is bounded in count and in time and talks to loopback only.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import httpx
import pytest
import torch

import course
from solutions.gpt import GPT, GPTConfig

MODEL = "course-gpt"
CONTEXT = 128


@pytest.fixture(scope="module", autouse=True)
def _single_threaded(one_thread):
    """Every test module here runs on one torch thread (the course plugin's `one_thread`)."""


@pytest.fixture(scope="session")
def tiny_model() -> GPT:
    torch.manual_seed(1234)
    m = GPT(GPTConfig(block_size=CONTEXT, n_layer=2, n_head=2, n_embd=32)).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.5)
    return m


def slow(engine, delay: float):
    """Make every engine step take at least `delay` seconds more (a slower model)."""
    inner = engine.step

    def step():
        time.sleep(delay)
        return inner()

    engine.step = step
    return engine


@pytest.fixture(scope="module")
def start(tiny_model):
    handles = []

    srv = course.load("server")  # here, not at import: --impl is known only now

    def run(*, step_delay: float = 0.0, max_batch_size: int = 8, model=None, **config):
        engine = srv.make_engine(model or tiny_model, max_batch_size=max_batch_size, max_tokens_per_step=64)
        if step_delay:
            slow(engine, step_delay)
        handle = srv.serve_in_thread(engine, None, srv.ServerConfig(**config), start_timeout=5.0)
        handles.append(handle)
        return handle

    yield run
    for h in handles:
        h.stop(timeout=10)


@pytest.fixture(scope="module")
def server(start):
    return start()


def _todo_hook(response: httpx.Response) -> None:
    if response.status_code == 500:
        response.read()
        try:
            message = response.json()["error"]["message"]
        except Exception:
            return
        if message.startswith("TODO: Exercise "):
            raise NotImplementedError(message[len("TODO: "):])


def client(handle, timeout: float = 10.0, **kw) -> httpx.Client:
    return httpx.Client(base_url=handle.url, timeout=timeout, event_hooks={"response": [_todo_hook]}, **kw)


def async_client(handle, timeout: float = 10.0, **kw) -> httpx.AsyncClient:
    async def hook(response):
        if response.status_code == 500:
            await response.aread()
            _todo_hook(response)

    return httpx.AsyncClient(base_url=handle.url, timeout=timeout, event_hooks={"response": [hook]}, **kw)


@pytest.fixture
def http(server):
    with client(server) as c:
        yield c


def health(handle) -> dict:
    return httpx.get(f"{handle.url}/health", timeout=5).json()


def settle(handle, timeout: float = 5.0) -> dict:
    """Wait (bounded) until the server holds no request at all; return its /health."""
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
                           assert_clean=assert_clean, sse_events=sse_events, slow=slow, MODEL=MODEL,
                           CONTEXT=CONTEXT)
