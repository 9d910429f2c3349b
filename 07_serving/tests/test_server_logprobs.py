"""Log-probabilities in OpenAI's shapes (issue 30), on the tiny course model (bytes are its
tokens), checked against the model's own log-softmax on the same weights:

- /v1/completions `logprobs: k`: each sampled token's log-probability, its top-k
  alternatives (plus the token chosen: vLLM's "up to k + 1"), `tokens`, `text_offset`.
- `echo: true` with `max_tokens` 0 or 1, lm-eval's loglikelihood request: the prompt's
  tokens first, the first one's log-probability and top null.
- streamed: the chunks' entries, joined, are the non-streamed answer's.
- /v1/chat/completions `logprobs: true, top_logprobs: k`: `choices[i].logprobs.content`.
- The distribution is the RAW model's (vLLM's default `logprobs_mode`): a sample at
  temperature 1.7 reports the same values a greedy request would for the same tokens.
- A request that asks for none costs nothing: the engine computes no log-probability.
Shapes are read through the unmodified `openai` client (its pydantic types).
"""

from __future__ import annotations

import math

import openai
import pytest
import torch

import course

pytestmark = pytest.mark.given

M = "course-gpt"
PROMPT = [100, 101, 102, 32, 102, 40, 120, 41, 58, 10, 32, 32]  # "def f(x):\n  " as byte ids
TOL = 1e-4  # float32: the engine's ragged batch against one full forward


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=30)


def reference(model, ids: list[int]) -> torch.Tensor:
    """log_softmax of the model's logits over `ids`, one full forward: row t predicts ids[t + 1]."""
    with torch.no_grad():
        out = model(torch.tensor([ids]))
    logits = out[0] if isinstance(out, tuple) else out
    return torch.log_softmax(logits[0].float(), dim=-1)


def tok(i: int) -> str:
    """The byte model's token string: a byte's character (U+FFFD for one that starts or
    continues a multi-byte character)."""
    return bytes([i]).decode("utf-8", errors="replace") if i < 256 else "<|endoftext|>"


def expected_entry(ref: torch.Tensor, t: int, token: int, k: int) -> tuple[float, dict[str, float]]:
    """Position t's log-probability of `token` and its completions top_logprobs dict: the
    top k by string (the first of tokens spelt alike), then the token chosen."""
    values, ids = ref[t].topk(k) if k else (torch.empty(0), torch.empty(0, dtype=torch.long))
    top: dict[str, float] = {}
    for i, v in zip(ids.tolist(), values.tolist()):
        top.setdefault(tok(i), v)
    lp = ref[t, token].item()
    top.setdefault(tok(token), lp)
    return lp, top


def check_entries(lp, ref: torch.Tensor, tokens: list[int], first_position: int, k: int, what: str) -> None:
    """The completion `logprobs` of `tokens`, token j predicted by ref row first_position + j."""
    assert lp.tokens == [tok(i) for i in tokens], f"{what}: tokens must be each token's string"
    for j, token in enumerate(tokens):
        want_lp, want_top = expected_entry(ref, first_position + j, token, k)
        got_lp, got_top = lp.token_logprobs[j], lp.top_logprobs[j]
        assert got_lp == pytest.approx(want_lp, abs=TOL), (
            f"{what}: token {j}'s logprob must be the model's log_softmax {want_lp:.5f}, got {got_lp}")
        assert got_top.keys() == want_top.keys(), (
            f"{what}: token {j}'s top_logprobs must be the {k} most likely tokens plus the one chosen, "
            f"{sorted(want_top)}, got {sorted(got_top)}")
        for s, v in want_top.items():
            assert got_top[s] == pytest.approx(v, abs=TOL), f"{what}: top_logprobs[{j}][{s!r}] must be {v:.5f}"


def test_completion_logprobs_are_the_models_log_softmax(server, oai, tiny_model):
    r = oai.completions.create(model=M, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3,
                               extra_body={"ignore_eos": True})
    c, ids = r.choices[0], _greedy(tiny_model, PROMPT, 6)
    assert len(c.logprobs.tokens) == r.usage.completion_tokens == 6, "one logprobs entry per generated token"
    check_entries(c.logprobs, reference(tiny_model, PROMPT + ids), ids, len(PROMPT) - 1, 3, "logprobs=3")
    assert c.logprobs.text_offset == list(range(6)), "text_offset: where each token's string starts (one char each)"


def _greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(reference(model, ids)[-1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_echo_gives_the_prompts_logprobs_as_lm_eval_asks(server, oai, tiny_model, max_tokens):
    """lm-eval's loglikelihood request: `logprobs: 1, echo: true, max_tokens: 1` (0 works too)."""
    r = oai.completions.create(model=M, prompt=PROMPT, max_tokens=max_tokens, temperature=0, logprobs=1, echo=True,
                               extra_body={"ignore_eos": True})
    c, n = r.choices[0], len(PROMPT)
    made = _greedy(tiny_model, PROMPT, max_tokens)
    assert c.text == bytes(PROMPT).decode() + "".join(tok(i) for i in made), "echo: the prompt's text comes first"
    assert r.usage.completion_tokens == max_tokens, f"max_tokens={max_tokens}: that many answer tokens"
    lp = c.logprobs
    assert len(lp.tokens) == n + max_tokens, "echo: an entry per prompt token, then per generated token"
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, (
        "the prompt's first token has no log-probability (nothing precedes it): null, as OpenAI and vLLM")
    assert lp.tokens[0] == tok(PROMPT[0])
    ref = reference(tiny_model, PROMPT + made)
    rest = lp.model_copy(update={k: getattr(lp, k)[1:] for k in ("tokens", "token_logprobs", "top_logprobs")})
    check_entries(rest, ref, PROMPT[1:] + made, 0, 1, f"echo, max_tokens={max_tokens}")
    assert lp.text_offset == list(range(n + max_tokens))
    loglikelihood = sum(lp.token_logprobs[1:n])
    assert loglikelihood == pytest.approx(sum(ref[t, PROMPT[t + 1]].item() for t in range(n - 1)), abs=1e-3)


def test_streamed_logprobs_join_to_the_answer(server, oai):
    body = dict(model=M, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=2, echo=True,
                extra_body={"ignore_eos": True})
    whole = oai.completions.create(**body).choices[0]
    tokens, lps, tops, offsets, text = [], [], [], [], ""
    for chunk in oai.completions.create(stream=True, **body):
        c = chunk.choices[0]
        text += c.text
        if c.logprobs is not None:
            tokens += c.logprobs.tokens
            lps += c.logprobs.token_logprobs
            tops += c.logprobs.top_logprobs
            offsets += c.logprobs.text_offset
    assert text == whole.text
    assert tokens == whole.logprobs.tokens, "the streamed tokens, joined, must be the answer's"
    assert offsets == whole.logprobs.text_offset, "a stream's text_offset counts from the choice's first chunk"
    assert lps[0] is None and tops[0] is None
    assert lps[1:] == pytest.approx(whole.logprobs.token_logprobs[1:], abs=1e-5)
    assert [t.keys() for t in tops[1:]] == [t.keys() for t in whole.logprobs.top_logprobs[1:]]


def test_logprobs_are_of_the_raw_distribution_not_the_tempered_one(server, oai, tiny_model, kit):
    """vLLM's default (logprobs_mode "raw_logprobs"): log_softmax of the model's logits,
    before temperature: a sample at temperature 1.7 reports the model's values."""
    msgs = [{"role": "user", "content": "hi"}]
    r = oai.chat.completions.create(model=M, messages=msgs, max_tokens=4, temperature=1.7, seed=3, logprobs=True)
    content = r.choices[0].logprobs.content
    ids = [e.bytes[0] for e in content]
    prompt = kit.client(server).post("/tokenize", json={"model": M, "messages": msgs}).json()["tokens"]
    ref = reference(tiny_model, prompt + ids)
    for j, (e, i) in enumerate(zip(content, ids)):
        raw = ref[len(prompt) - 1 + j, i].item()
        assert e.logprob == pytest.approx(raw, abs=TOL), (
            f"token {j}: the raw model log-probability {raw:.5f} (not the temperature-scaled one), got {e.logprob}")
        assert e.top_logprobs == [], "top_logprobs 0 (the default): no alternatives"


def test_chat_logprobs_content(server, oai, tiny_model, kit):
    msgs = [{"role": "user", "content": "x = "}]
    r = oai.chat.completions.create(model=M, messages=msgs, max_tokens=5, temperature=0, logprobs=True,
                                    top_logprobs=2)
    c = r.choices[0]
    content = c.logprobs.content
    assert len(content) == r.usage.completion_tokens, "one content entry per answer token"
    data = b"".join(bytes(e.bytes) for e in content)
    assert data.decode("utf-8", errors="replace") == c.message.content, "the entries' bytes, joined, are the answer"
    prompt = kit.client(server).post("/tokenize", json={"model": M, "messages": msgs}).json()["tokens"]
    ids = list(data)
    ref = reference(tiny_model, prompt + ids)
    for j, (e, i) in enumerate(zip(content, ids)):
        t = len(prompt) - 1 + j
        assert e.token == tok(i) and e.logprob == pytest.approx(ref[t, i].item(), abs=TOL), (
            f"content[{j}]: token {tok(i)!r}, logprob {ref[t, i].item():.5f} (the model's log_softmax)")
        values, top_ids = ref[t].topk(2)
        assert [x.bytes for x in e.top_logprobs] == [[k] for k in top_ids.tolist()], (
            f"content[{j}].top_logprobs: the 2 most likely tokens, most likely first")
        assert [x.logprob for x in e.top_logprobs] == pytest.approx(values.tolist(), abs=TOL)
        assert e.top_logprobs[0].bytes == [i], "greedy: the token chosen is the most likely"
    streamed = []
    for chunk in oai.chat.completions.create(model=M, messages=msgs, max_tokens=5, temperature=0, logprobs=True,
                                             top_logprobs=2, stream=True):
        if chunk.choices and chunk.choices[0].logprobs is not None:
            streamed += chunk.choices[0].logprobs.content
    assert [(e.token, e.bytes) for e in streamed] == [(e.token, e.bytes) for e in content]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content], abs=1e-5)


def test_no_logprobs_asked_none_computed(server, oai, monkeypatch):
    """`logprobs` absent (or chat's false): null, and the engine computes none."""
    engine_module = __import__(course.load("batching").Engine.__module__, fromlist=["_"])
    calls = []
    for name in ("sample_logprobs", "prompt_logprobs"):
        real = getattr(engine_module, name)
        monkeypatch.setattr(engine_module, name, lambda *a, _real=real, _name=name, **kw: calls.append(_name)
                            or _real(*a, **kw))
    r = oai.completions.create(model=M, prompt=PROMPT, max_tokens=3, temperature=0)
    ch = oai.chat.completions.create(model=M, messages=[{"role": "user", "content": "x"}], max_tokens=3,
                                     logprobs=False)
    assert r.choices[0].logprobs is None and ch.choices[0].logprobs is None
    assert calls == [], f"a request that asks for no log-probabilities must cost none; the engine called {calls}"
    oai.completions.create(model=M, prompt=PROMPT, max_tokens=1, logprobs=0, echo=True)
    assert calls == ["sample_logprobs", "prompt_logprobs"], "(the probe sees a request that asks)"


@pytest.mark.parametrize("endpoint,extra,param", [
    ("completions", {"logprobs": 21}, "logprobs"),
    ("completions", {"logprobs": True}, "logprobs"),
    ("completions", {"max_tokens": 0}, "max_tokens"),
    ("chat", {"top_logprobs": 3}, "top_logprobs"),
    ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
])
def test_bad_logprobs_are_400s_naming_the_field(server, oai, endpoint, extra, param):
    with pytest.raises(openai.BadRequestError) as err:
        if endpoint == "completions":
            oai.completions.create(model=M, prompt=PROMPT, **extra)
        else:
            oai.chat.completions.create(model=M, messages=[{"role": "user", "content": "x"}], **extra)
    assert err.value.body["param"] == param, f"{extra}: a 400 naming {param!r}, got {err.value.body}"


def test_logprobs_are_finite_log_probabilities(server, oai):
    """Every reported value is a finite number <= 0, and a position's top values are sorted."""
    r = oai.completions.create(model=M, prompt=[PROMPT, PROMPT[:5]], max_tokens=3, n=2, temperature=1.0, seed=1,
                               logprobs=4, echo=True)
    assert len(r.choices) == 4
    for c in r.choices:
        for lp, top in zip(c.logprobs.token_logprobs[1:], c.logprobs.top_logprobs[1:]):
            assert math.isfinite(lp) and lp <= 0
            assert all(math.isfinite(v) and v <= 0 for v in top.values())
