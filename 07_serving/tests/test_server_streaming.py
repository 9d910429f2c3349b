"""7.5 The streaming bridge: the unmodified `openai` client against both endpoints,
streaming and not, n > 1, usage; SSE framing byte for byte; greedy answers over HTTP equal
the engine's offline answers; the TokenStream never blocks its producer."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import openai
import pytest

import course
from solutions.gpt import load_default
from solutions.kv_cache import generate
from solutions.tokenizer import EOT, ByteTokenizer

srv = course.load("server")
pytestmark = pytest.mark.exercise("7.5")
M = "course-gpt"


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=20)


def test_sse_frames_one_event():
    """Byte for byte; each rule of the framing says which it is when it is broken."""
    got = srv.sse({"a": 1, "b": "é"})
    assert isinstance(got, bytes), f"sse returns the event's bytes, got {type(got).__name__}"
    assert got.startswith(b"data: "), f"an event starts with 'data: ', got {got[:12]!r}"
    assert got.endswith(b"\n\n") and not got.endswith(b"\r\n\r\n"), (
        f"an event ends with one blank line, \\n\\n, never CRLF: got {got[-6:]!r}")
    assert b"\\u" not in got and "é".encode() in got, (
        f"non-ASCII text goes as its own UTF-8 bytes, never a \\uXXXX escape: got {got!r}")
    assert b", " not in got and b": " not in got[len(b"data: "):], (
        f"the JSON is the most compact: no space after ',' or ':', got {got!r}")
    assert got == 'data: {"a":1,"b":"é"}\n\n'.encode()
    done = srv.sse("[DONE]")
    assert done == b"data: [DONE]\n\n", f"a str is sent as it is, not as JSON (no quotes): got {done!r}"


def in_thread(fn, *args) -> tuple[threading.Thread, list]:
    """Run fn in a thread; what it raises lands in the returned list (re-raise it in the test)."""
    errors: list = []

    def run():
        try:
            fn(*args)
        except BaseException as e:
            errors.append(e)

    return threading.Thread(target=run), errors


def test_token_stream_coalesces_and_never_blocks_the_producer():
    async def main():
        stream = srv.TokenStream(asyncio.get_running_loop())
        n = 5000
        t0 = time.perf_counter()
        producer, errors = in_thread(lambda: [stream.put(("delta", 0, "x")) for _ in range(n)])
        producer.start()
        producer.join(5)
        if errors:
            raise errors[0]
        assert not producer.is_alive()
        put_s = time.perf_counter() - t0
        await asyncio.sleep(0.05)  # let the loop run the scheduled puts
        got = []
        batches = 0
        while len(got) < n:
            got += await asyncio.wait_for(stream.get_batch(), 5)
            batches += 1
        assert got == [("delta", 0, "x")] * n, "events lost, duplicated or reordered"
        assert batches < n / 10, f"a reader that falls behind must get the backlog in few batches, got {batches}"
        return put_s

    asyncio.run(main())


def test_token_stream_waits_for_the_first_event():
    async def main():
        loop = asyncio.get_running_loop()
        stream = srv.TokenStream(loop)
        later, errors = in_thread(lambda: (time.sleep(0.05), stream.put(("finish", 0, "stop", 1, 1))))
        later.start()
        try:
            return await asyncio.wait_for(stream.get_batch(), 5)
        finally:
            later.join(5)
            if errors:
                raise errors[0]

    assert asyncio.run(main()) == [("finish", 0, "stop", 1, 1)]


def test_token_stream_put_after_the_loop_closed_is_dropped():
    loop = asyncio.new_event_loop()
    stream = srv.TokenStream(loop)
    loop.close()
    try:
        stream.put(("delta", 0, "late"))  # the server is gone: no error, nothing to do
    except Exception as e:  # noqa: BLE001 - whatever it raises breaks the rule
        pytest.fail(f"put after the event loop closed must drop the event silently; it raised "
                    f"{type(e).__name__}: {e}")


def test_token_stream_only_the_loops_thread_touches_the_queue():
    """The engine thread puts; the asyncio.Queue is changed on the loop's thread only (an
    asyncio object touched from another thread does not wake a waiting reader)."""
    touched: set[int] = set()

    class Recording(asyncio.Queue):
        def put_nowait(self, item):
            touched.add(threading.get_ident())
            super().put_nowait(item)

    async def main():
        stream = srv.TokenStream(asyncio.get_running_loop())
        stream.queue = Recording()
        reader = asyncio.ensure_future(stream.get_batch())
        await asyncio.sleep(0.01)  # the reader waits on the empty queue now
        producer, errors = in_thread(lambda: [stream.put(("delta", 0, c)) for c in "abc"])
        producer.start()
        producer.join(5)
        if errors:
            reader.cancel()  # a reader that already failed (a stub) has its exception retrieved, not logged later
            if reader.done() and not reader.cancelled():
                reader.exception()
            raise errors[0]
        got = await asyncio.wait_for(reader, 5)
        while len(got) < 3:
            got += await asyncio.wait_for(stream.get_batch(), 5)
        return got

    assert asyncio.run(main()) == [("delta", 0, "a"), ("delta", 0, "b"), ("delta", 0, "c")]
    assert touched == {threading.get_ident()}, \
        "put must not touch self.queue from the calling thread: hand it to the loop (call_soon_threadsafe)"


def test_completions_non_streaming(oai):
    r = oai.completions.create(model=M, prompt="def f(x):", max_tokens=12, temperature=0)
    assert r.object == "text_completion" and r.model == M and len(r.choices) == 1
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length") and c.index == 0
    assert r.usage.prompt_tokens == len("def f(x):")
    assert 1 <= r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    if c.finish_reason == "length":
        assert r.usage.completion_tokens == 12


def test_streaming_equals_non_streaming(oai):
    kw = dict(model=M, prompt="import os\n", max_tokens=20, temperature=0)
    whole = oai.completions.create(**kw)
    chunks = list(oai.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == whole.choices[0].text
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None, "include_usage: a last chunk with usage"
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(ch.usage is None for ch in chunks[:-1])


def test_chat_streaming_first_chunk_has_the_role(oai):
    kw = dict(model=M, messages=[{"role": "user", "content": "hi"}], max_tokens=10, temperature=0)
    whole = oai.chat.completions.create(**kw)
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    chunks = list(oai.chat.completions.create(**kw, stream=True))
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert all(ch.usage is None for ch in chunks), "no usage chunk unless asked for"


def test_n_choices_streaming_and_not(oai):
    kw = dict(model=M, prompt="class A:", max_tokens=8, temperature=1.0, seed=3, n=3)
    whole = oai.completions.create(**kw)
    assert sorted(c.index for c in whole.choices) == [0, 1, 2]
    assert whole.usage.prompt_tokens == len("class A:"), "the prompt counts once"
    assert whole.usage.completion_tokens <= 3 * 8
    texts = {}
    done = {}
    for ch in oai.completions.create(**kw, stream=True, stream_options={"include_usage": True}):
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason:
                done[c.index] = c.finish_reason
        if ch.usage:
            assert ch.usage.completion_tokens == whole.usage.completion_tokens
    assert sorted(done) == [0, 1, 2]
    assert [texts[i] for i in range(3)] == [c.text for c in sorted(whole.choices, key=lambda c: c.index)], \
        "seeded sampling must give the same n answers streamed or not"


def test_stop_string_cuts_the_text(oai):
    base = oai.completions.create(model=M, prompt="abc", max_tokens=30, temperature=0).choices[0].text
    stops = [s for s in (base[3:5], base[6:7]) if s]
    if not stops:
        pytest.skip("the model's answer is too short to pick a stop string from")
    r = oai.completions.create(model=M, prompt="abc", max_tokens=30, temperature=0, stop=stops)
    cut = min(i for i in (base.find(s) for s in stops) if i >= 0)
    assert r.choices[0].text == base[:cut]
    assert r.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in
                       oai.completions.create(model=M, prompt="abc", max_tokens=30, temperature=0, stop=stops,
                                              stream=True) if ch.choices)
    assert streamed == base[:cut]


def test_sse_framing_byte_for_byte(server, kit):
    with kit.client(server) as c:
        with c.stream("POST", "/v1/chat/completions", json={
                "model": M, "messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            raw = r.read()
    events = kit.sse_events(raw)
    assert events[-1] == "[DONE]"
    objs = [json.loads(e) for e in events[:-1]]
    assert len({o["id"] for o in objs}) == 1 and all(o["object"] == "chat.completion.chunk" for o in objs)
    assert objs[0]["choices"][0]["delta"]["role"] == "assistant"
    assert objs[-1]["choices"] == [] and set(objs[-1]["usage"]) == {"prompt_tokens", "completion_tokens",
                                                                       "total_tokens"}
    body = [o for o in objs[1:-1]]
    assert body[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(o["choices"][0]["finish_reason"] is None for o in body[:-1])
    # every event is compact JSON, re-serialisable to the same bytes
    loose = [e for e in events[:-1] if e != json.dumps(json.loads(e), separators=(",", ":"), ensure_ascii=False)]
    assert not loose, ("every event is the most compact JSON (no space after ',' or ':') with non-ASCII as "
                       f"UTF-8, never \\uXXXX: {loose[0][:120]!r}" if loose else "")


def test_multibyte_text_streams_whole_characters(oai):
    """A byte-level model may emit half a character: the stream must never show U+FFFD for
    a character that is completed by the next token."""
    r = oai.completions.create(model=M, prompt=[0xC3], max_tokens=1, temperature=0)
    assert isinstance(r.choices[0].text, str)
    d = srv.Detokenizer()
    assert d.push(0xC3) == ("", False)
    assert d.push(0xA9) == ("é", False)


def test_greedy_over_http_equals_the_engine_offline(start, kit):
    """The default model: greedy answers over HTTP (several at once, streaming and not)
    are exactly the tokens stage 04's generate gives each prompt alone."""
    model, tok = load_default()
    h = start(model=model)
    oai = openai.OpenAI(base_url=f"{h.url}/v1", api_key="x", max_retries=0, timeout=30)
    prompts = ["def main():\n", "import sys", "x = [i for i in", "class Foo(Base):"]
    offline = []
    for p in prompts:
        res = generate(model, [tok.encode(p)], 24, stop=[EOT])
        offline.append(tok.decode(res.tokens[0]))

    from concurrent.futures import ThreadPoolExecutor

    def ask(i):
        if i % 2:
            return "".join(ch.choices[0].text for ch in oai.completions.create(
                model=M, prompt=prompts[i], max_tokens=24, temperature=0, stream=True) if ch.choices)
        return oai.completions.create(model=M, prompt=prompts[i], max_tokens=24, temperature=0).choices[0].text

    with ThreadPoolExecutor(len(prompts)) as pool:
        online = list(pool.map(ask, range(len(prompts))))
    assert online == offline
    kit.assert_clean(h)
