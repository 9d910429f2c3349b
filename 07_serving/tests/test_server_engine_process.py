"""The engine in a process of its own (given code, `engine_process.py`: what `course serve`
runs unless `--in-process`): the same answers as the engine in a thread, errors and finished
records across the pipe, clients that leave, and a stop that ends the process. (An error made
in the engine process reaching the client needs a second engine process, seconds of start:
the held-out test_an_error_made_in_the_engine_process_reaches_the_client.)"""

from __future__ import annotations

import asyncio
import json
import pickle

import httpx
import openai
import pytest

import course
from solutions.kv_cache import generate_alone
from solutions.tokenizer import EOT, ByteTokenizer

srv = course.load("server")
M = "course-gpt"
HTTP = pytest.mark.exercise("7.5")  # every answer crosses 7.1, 7.2, 7.4-7.6: they must be written


@pytest.fixture(scope="module")
def remote(tiny_model):
    engine = srv.EngineProcess(tiny_model, max_batch_size=8, max_tokens_per_step=64, num_blocks=64)
    handle = srv.serve_in_thread(engine, None, srv.ServerConfig(), start_timeout=120.0)
    yield handle, engine
    handle.stop()


@HTTP
def test_answers_equal_generate_alone_streamed_or_not(remote, tiny_model, kit):
    h, _ = remote
    tok = ByteTokenizer()
    oai = openai.OpenAI(base_url=f"{h.url}/v1", api_key="unused", max_retries=0, timeout=30)
    prompts = ["def f(x):", "import os", "class A:"]
    ids = [generate_alone(tiny_model, tok.encode(p), 12, stop=[EOT])[0] for p in prompts]
    want = [tok.decode(i) for i in ids]
    got = oai.completions.create(model=M, prompt=prompts, max_tokens=12, temperature=0, n=2)
    assert [c.text for c in sorted(got.choices, key=lambda c: c.index)] == [w for w in want for _ in range(2)]
    stream = oai.completions.create(model=M, prompt=prompts[0], max_tokens=12, temperature=0, stream=True,
                                    stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want[0]
    assert chunks[-1].usage.completion_tokens == len(ids[0])
    kit.assert_clean(h)
    line = h.state.finished_lines[-1]  # records cross the pipe: the log line is written here
    assert set(line) == set(srv.LOG_KEYS) and line["output_tokens"] == len(ids[0])


@HTTP
def test_clients_that_leave_leak_nothing(remote, kit):
    h, _ = remote
    n = 12

    async def one(c, i):
        body = {"model": M, "prompt": f"client {i}", "max_tokens": 100, "temperature": 0, "stream": True}
        async with c.stream("POST", "/v1/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    return json.loads(line[6:])["choices"][0]["index"]  # leave after the first token

    async def main():
        async with kit.async_client(h, timeout=20, limits=httpx.Limits(max_connections=n)) as c:
            return await asyncio.wait_for(asyncio.gather(*(one(c, i) for i in range(n))), 30)

    assert asyncio.run(main()) == [0] * n
    kit.assert_clean(h)


@pytest.mark.given
def test_stop_ends_the_engine_process(tiny_model):
    engine = srv.EngineProcess(tiny_model, max_batch_size=2, num_blocks=16)
    handle = srv.serve_in_thread(engine, None, srv.ServerConfig(), start_timeout=120.0)
    with httpx.Client(base_url=handle.url, timeout=10) as c:
        assert c.get("/health").json()["total_blocks"] == 16
    handle.stop()
    engine.proc.join(60)  # a bound reached only when broken
    assert not engine.proc.is_alive() and engine.proc.exitcode == 0


@pytest.mark.given
def test_a_bad_size_fails_the_start_with_the_engines_error(tiny_model):
    with pytest.raises(RuntimeError, match="max_batch_size"):
        srv.EngineProcess(tiny_model, max_batch_size=0)


@pytest.mark.given
def test_gemm_layout_changes_the_weights_layout_not_the_model(tiny_model):
    """The engine process's `gemm_layout`: every Linear weight column-major with the same
    values, the tied head (the token embedding) untouched, the logits as before to float32
    rounding; a bfloat16 model is left as it is."""
    import copy

    import torch
    from torch import nn

    m = copy.deepcopy(tiny_model)
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    idx = torch.randint(0, 256, (3, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = m(idx)
        assert srv.gemm_layout(m) is m
        got = m(idx)
    for name, p in m.named_parameters():
        assert torch.equal(p, before[name]), name
    linears = [mod for mod in m.modules() if isinstance(mod, nn.Linear) and mod.weight is not m.lm_head.weight]
    assert linears and all(lin.weight.stride() == (1, lin.weight.shape[0]) for lin in linears)
    assert m.lm_head.weight is m.transformer.wte.weight and m.lm_head.weight.is_contiguous()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    half = copy.deepcopy(tiny_model).to(torch.bfloat16)
    srv.gemm_layout(half)
    assert all(p.is_contiguous() for p in half.parameters())


@pytest.mark.given
def test_freeze_heap_moves_what_a_process_holds_out_of_later_collections():
    """`freeze_heap` (called by the engine process once its engine is built, and by the CLI
    before it serves): every object alive goes to the permanent generation, so a full
    collection under load no longer walks the model and the engine."""
    import gc

    try:
        srv.engine_process.freeze_heap()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
