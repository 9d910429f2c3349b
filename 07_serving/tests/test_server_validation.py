"""7.1 Request validation: every bad input gets the right 4xx with an OpenAI-shaped error
naming the problem, and the server keeps serving. `parse_request` is given code except for
7.1's `token_budget` (n, max_tokens, the prompt against the context): its own checks are
tests of given code; the budget's and every answer over HTTP are 7.1's."""

from __future__ import annotations

import json

import pytest

import course

srv = course.load("server")
EX = pytest.mark.exercise("7.1")

M = "course-gpt"
CTX = 128
LIMITS = srv.Limits(context=CTX, vocab_size=257, max_n=4)
OK = {"model": M, "prompt": "hello", "max_tokens": 4}
CHAT = {"model": M, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def with_(base: dict, **kw) -> dict:
    out = dict(base)
    for k, v in kw.items():
        if v is _DROP:
            out.pop(k, None)
        else:
            out[k] = v
    return out


_DROP = object()

#: (id, endpoint, body, status, param): a body of bytes is sent as-is (not JSON-encoded)
BAD = [
    ("not json", "completions", b"{\"model\": ", 400, None),
    ("json array", "completions", [1, 2], 400, None),
    ("json string", "completions", "hello", 400, None),
    ("missing model", "completions", with_(OK, model=_DROP), 400, "model"),
    ("model not a string", "completions", with_(OK, model=3), 400, "model"),
    ("unknown model", "completions", with_(OK, model="gpt-4o"), 404, "model"),
    ("missing prompt", "completions", with_(OK, prompt=_DROP), 400, "prompt"),
    ("prompt a number", "completions", with_(OK, prompt=12), 400, "prompt"),
    ("prompt empty", "completions", with_(OK, prompt=""), 400, "prompt"),
    ("prompt ids out of vocabulary", "completions", with_(OK, prompt=[1, 2, 999]), 400, "prompt"),
    ("prompt batch with an empty prompt", "completions", with_(OK, prompt=["a", ""]), 400, "prompt"),
    ("prompt too long", "completions", with_(OK, prompt="x" * CTX), 400, "prompt"),
    ("max_tokens 0", "completions", with_(OK, max_tokens=0), 400, "max_tokens"),
    ("max_tokens negative", "completions", with_(OK, max_tokens=-3), 400, "max_tokens"),
    ("max_tokens a string", "completions", with_(OK, max_tokens="4"), 400, "max_tokens"),
    ("max_tokens a bool", "completions", with_(OK, max_tokens=True), 400, "max_tokens"),
    ("max_tokens a float", "completions", with_(OK, max_tokens=4.0), 400, "max_tokens"),
    ("max_tokens past the context", "completions", with_(OK, max_tokens=CTX), 400, "max_tokens"),
    ("n 0", "completions", with_(OK, n=0), 400, "n"),
    ("n a bool", "completions", with_(OK, n=True), 400, "n"),
    ("n a float", "completions", with_(OK, n=2.0), 400, "n"),
    ("n too large", "completions", with_(OK, n=1000), 400, "n"),
    ("temperature negative", "completions", with_(OK, temperature=-0.5), 400, "temperature"),
    ("temperature above 2", "completions", with_(OK, temperature=2.5), 400, "temperature"),
    ("temperature a string", "completions", with_(OK, temperature="hot"), 400, "temperature"),
    ("top_p 0", "completions", with_(OK, top_p=0), 400, "top_p"),
    ("top_p above 1", "completions", with_(OK, top_p=1.5), 400, "top_p"),
    ("seed a float", "completions", with_(OK, seed=1.5), 400, "seed"),
    ("stop a number", "completions", with_(OK, stop=5), 400, "stop"),
    ("stop five strings", "completions", with_(OK, stop=["a", "b", "c", "d", "e"]), 400, "stop"),
    ("stop an empty string", "completions", with_(OK, stop=""), 400, "stop"),
    ("stream a string", "completions", with_(OK, stream="yes"), 400, "stream"),
    ("stream_options without stream", "completions", with_(OK, stream_options={"include_usage": True}), 400,
     "stream_options"),
    ("include_usage not a bool", "completions", with_(OK, stream=True, stream_options={"include_usage": 1}), 400,
     "stream_options.include_usage"),
    ("unknown field", "completions", with_(OK, foo=1), 400, "foo"),
    ("logprobs past vLLM's 20", "completions", with_(OK, logprobs=21), 400, "logprobs"),
    ("logprobs negative", "completions", with_(OK, logprobs=-1), 400, "logprobs"),
    ("logprobs a bool", "completions", with_(OK, logprobs=True), 400, "logprobs"),
    ("echo a string", "completions", with_(OK, echo="yes"), 400, "echo"),
    ("max_tokens 0 with echo false", "completions", with_(OK, max_tokens=0, echo=False), 400, "max_tokens"),
    ("unsupported best_of", "completions", with_(OK, best_of=3), 400, "best_of"),
    ("chat: missing messages", "chat/completions", with_(CHAT, messages=_DROP), 400, "messages"),
    ("chat: empty messages", "chat/completions", with_(CHAT, messages=[]), 400, "messages"),
    ("chat: bad role", "chat/completions", with_(CHAT, messages=[{"role": "robot", "content": "x"}]), 400,
     "messages[0].role"),
    ("chat: content a number", "chat/completions", with_(CHAT, messages=[{"role": "user", "content": 1}]), 400,
     "messages[0].content"),
    ("chat: prompt is not a chat field", "chat/completions", with_(CHAT, prompt="x"), 400, "prompt"),
    ("chat: max_completion_tokens 0", "chat/completions", with_(CHAT, max_completion_tokens=0), 400,
     "max_completion_tokens"),
    ("chat: logprobs an int", "chat/completions", with_(CHAT, logprobs=1), 400, "logprobs"),
    ("chat: top_logprobs without logprobs", "chat/completions", with_(CHAT, top_logprobs=2), 400, "top_logprobs"),
    ("chat: top_logprobs past 20", "chat/completions", with_(CHAT, logprobs=True, top_logprobs=21), 400,
     "top_logprobs"),
    ("chat: echo is not a chat field", "chat/completions", with_(CHAT, echo=True), 400, "echo"),
]


def _params(rows):
    return [pytest.param(*row[1:], id=row[0]) for row in rows]


def _budget_row(row) -> bool:
    """A bad input that 7.1's token_budget must catch (the rest is parse_request's given code)."""
    return row[4] in ("n", "max_tokens", "max_completion_tokens") or row[0] == "prompt too long"


@pytest.mark.given
@pytest.mark.parametrize("endpoint,body,status,param",
                         _params(r for r in BAD if not isinstance(r[2], bytes) and not _budget_row(r)))
def test_parse_request_rejects(endpoint, body, status, param):
    _rejects(endpoint, body, status, param)


@EX
@pytest.mark.parametrize("endpoint,body,status,param", _params(r for r in BAD if _budget_row(r)))
def test_parse_request_rejects_past_the_budget(endpoint, body, status, param):
    _rejects(endpoint, body, status, param)


def _rejects(endpoint, body, status, param):
    kind = "completion" if endpoint == "completions" else "chat"
    with pytest.raises(srv.APIError) as err:
        srv.parse_request(body, kind, LIMITS)
    e = err.value
    assert e.status == status, e.message
    assert e.param == param, e.message
    assert e.message and isinstance(e.message, str)
    assert set(e.body()["error"]) == {"message", "type", "param", "code"}


@EX
def test_parse_request_accepts_and_fills_defaults():
    g = srv.parse_request({"model": M, "prompt": "héllo"}, "completion", LIMITS)
    assert g.prompt_ids == tuple("héllo".encode())
    assert g.max_tokens == 16 and g.n == 1 and g.temperature == 1.0 and not g.stream and g.stop == ()
    g = srv.parse_request({"model": M, "prompt": [5, 6, 7], "max_tokens": CTX - 3, "n": 4, "stop": "\n",
                           "temperature": 0, "top_p": 0.5, "seed": 7, "stream": True,
                           "stream_options": {"include_usage": True}, "user": "u", "presence_penalty": 0,
                           "logprobs": None}, "completion", LIMITS)
    assert (g.prompt_ids, g.max_tokens, g.n, g.stop, g.temperature, g.top_p, g.seed) == \
        ((5, 6, 7), CTX - 3, 4, ("\n",), 0.0, 0.5, 7)
    assert g.stream and g.include_usage
    # null means "the default"
    g = srv.parse_request({"model": M, "prompt": "a", "max_tokens": None, "n": None, "stop": None,
                           "temperature": None}, "completion", LIMITS)
    assert (g.max_tokens, g.n, g.stop, g.temperature) == (16, 1, (), 1.0)


@EX
def test_parse_request_chat_template_and_default_max_tokens():
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    g = srv.parse_request({"model": M, "messages": msgs}, "chat", LIMITS)
    text = srv.render_chat([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    assert text == "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n"
    assert g.prompt_ids == tuple(text.encode())
    assert g.max_tokens == CTX - len(g.prompt_ids), "chat's default max_tokens is what the context leaves"
    g = srv.parse_request({"model": M, "messages": msgs, "max_completion_tokens": 5}, "chat", LIMITS)
    assert g.max_tokens == 5


@EX
def test_token_budget_counts_against_the_context():
    """7.1's token_budget alone: (max_tokens, n) within the context, else a 400 naming the field."""
    budget = srv.token_budget
    assert budget({}, "completion", 10, LIMITS) == (16, 1), "completion default: 16 tokens, n 1"
    assert budget({"max_tokens": None, "n": None}, "completion", 10, LIMITS) == (16, 1), "null is the default"
    assert budget({}, "completion", CTX - 5, LIMITS) == (5, 1), \
        "the default max_tokens must be cut to what the context leaves (min(16, left))"
    assert budget({}, "chat", 100, LIMITS) == (CTX - 100, 1), "chat's default max_tokens is all the context leaves"
    assert budget({"max_tokens": 3, "max_completion_tokens": 7}, "chat", 10, LIMITS) == (7, 1), \
        "chat: max_completion_tokens wins over max_tokens when it is set"
    assert budget({"max_tokens": 3, "max_completion_tokens": None}, "chat", 10, LIMITS) == (3, 1), \
        "chat: a null max_completion_tokens leaves max_tokens in charge"
    assert budget({"n": 4, "max_tokens": CTX - 1}, "completion", 1, LIMITS) == (CTX - 1, 4)
    out = budget({"n": 2, "max_tokens": 3}, "completion", 5, LIMITS)
    assert all(type(v) is int for v in out), "plain ints"


@EX
@pytest.mark.parametrize("body,kind,prompt_tokens,param,code", [
    ({"n": 5}, "completion", 5, "n", None),
    ({"n": True}, "completion", 5, "n", None),
    ({}, "completion", CTX, "prompt", "context_length_exceeded"),
    ({"max_tokens": 4}, "completion", CTX, "prompt", "context_length_exceeded"),
    ({"max_tokens": 2}, "completion", CTX - 1, "max_tokens", "context_length_exceeded"),
    ({"max_tokens": False}, "completion", 5, "max_tokens", None),
    ({"max_tokens": 4.0}, "completion", 5, "max_tokens", None),
    ({"max_tokens": 4, "max_completion_tokens": 0}, "chat", 5, "max_completion_tokens", None),
    ({"max_completion_tokens": CTX}, "chat", 5, "max_completion_tokens", "context_length_exceeded"),
    ({"n": 0, "max_tokens": 0}, "completion", CTX, "n", None),
    ({"max_tokens": 0}, "completion", CTX, "prompt", "context_length_exceeded"),
])
def test_token_budget_rejects(body, kind, prompt_tokens, param, code):
    with pytest.raises(srv.APIError) as err:
        srv.token_budget(body, kind, prompt_tokens, LIMITS)
    e = err.value
    assert e.status == 400, e.message
    assert e.param == param, f"param must name the field checked first that fails ({param}): {e.message}"
    assert e.code == code, f"code must be {code!r} for this case: {e.message}"


@EX
def test_prompt_exactly_at_the_limit():
    g = srv.parse_request(with_(OK, prompt="x" * (CTX - 4), max_tokens=4), "completion", LIMITS)
    assert len(g.prompt_ids) + g.max_tokens == CTX
    with pytest.raises(srv.APIError) as err:
        srv.parse_request(with_(OK, prompt="x" * (CTX - 4), max_tokens=5), "completion", LIMITS)
    assert err.value.code == "context_length_exceeded"


@EX
@pytest.mark.parametrize("endpoint,body,status,param", _params(BAD))
def test_bad_input_over_http(server, kit, endpoint, body, status, param):
    with kit.client(server) as c:
        if isinstance(body, bytes):
            r = c.post(f"/v1/{endpoint}", content=body, headers={"content-type": "application/json"})
        else:
            r = c.post(f"/v1/{endpoint}", content=json.dumps(body), headers={"content-type": "application/json"})
        assert r.status_code == status, r.text
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert err["param"] == param and err["message"]
        # and the server is alive and still answers a good request
        ok = c.post("/v1/completions", json={"model": M, "prompt": "ok", "max_tokens": 2})
        assert ok.status_code == 200, ok.text
