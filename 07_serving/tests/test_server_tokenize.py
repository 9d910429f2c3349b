"""vLLM's tokenizer endpoints (issue 30), given code: POST /tokenize (a prompt, or chat
messages) and POST /detokenize, in vLLM's request and response shapes, answered with the
served model's tokenizer. What a client relies on: the ids round-trip to the same text
(ASCII or not), `count` is the `usage.prompt_tokens` the completions and chat endpoints
charge for the same prompt, `max_model_len` is the context /v1/models states, `token_strs`
are the exported tokenizer's own strings, and a bad body is an OpenAI-shaped 400 naming its
field (a foreign model 404) like the generation endpoints'. One server for the module; the
API key's rule is checked in test_server_given.py (its keyed server)."""

from __future__ import annotations

import importlib

import pytest

import course
from solutions.tokenizer import ByteTokenizer

srv = course.load("server")
M = "course-gpt"
TEXTS = ["def f(x):\n    return x + 1\n", "héllo wörld ¿qué? 日本語", "emoji 😀🐍 ✓", " \t\r\n"]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hé 😀"},
        {"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]


def _ok(c, path: str, body: dict) -> dict:
    r = c.post(path, json=body)
    assert r.status_code == 200, f"POST {path} {body}: {r.status_code} {r.text}"
    return r.json()


@pytest.mark.given
def test_tokenize_then_detokenize_gives_the_text_back(server, kit):
    with kit.client(server) as c:
        context = c.get("/v1/models").json()["data"][0]["max_model_len"]
        for text in [*TEXTS, ""]:
            out = _ok(c, "/tokenize", {"model": M, "prompt": text})
            assert set(out) == {"count", "max_model_len", "tokens", "token_strs"}, f"vLLM's response fields: {out}"
            assert out["count"] == len(out["tokens"]), f"count is the number of tokens: {out}"
            assert out["max_model_len"] == context, "max_model_len is the context /v1/models states"
            assert out["token_strs"] is None, "token_strs is null unless return_token_strs is asked"
            back = _ok(c, "/detokenize", {"model": M, "tokens": out["tokens"]})
            assert back == {"prompt": text}, f"detokenize(tokenize(text)) must be the text: {text!r} -> {back}"
        # `model` may be left out (vLLM: the served model); empty ids are the empty text
        assert _ok(c, "/tokenize", {"prompt": "abc"})["count"] == 3
        assert _ok(c, "/detokenize", {"tokens": []}) == {"prompt": ""}


@pytest.mark.given
def test_count_is_what_the_generation_endpoints_charge(server, kit):
    """The point of /tokenize: a client counts a prompt's tokens before sending it. Its count
    must be the completions endpoint's usage.prompt_tokens for the same text, and for messages
    the chat endpoint's (the same template, the same assistant cue)."""
    with kit.client(server) as c:
        for text in TEXTS:
            usage = _ok(c, "/v1/completions", {"model": M, "prompt": text, "max_tokens": 1})["usage"]
            count = _ok(c, "/tokenize", {"model": M, "prompt": text})["count"]
            assert count == usage["prompt_tokens"], f"{text!r}: /tokenize counts {count}, completions charge {usage}"
        for messages in (CHAT, CHAT[1:2], [{"role": "user", "content": [{"type": "text", "text": "hé"}]}]):
            usage = _ok(c, "/v1/chat/completions", {"model": M, "messages": messages, "max_tokens": 1})["usage"]
            count = _ok(c, "/tokenize", {"model": M, "messages": messages})["count"]
            assert count == usage["prompt_tokens"], f"{messages}: /tokenize counts {count}, chat charges {usage}"
        # without the assistant cue, or ending inside the last message (a prefill), as transformers renders
        full = _ok(c, "/tokenize", {"messages": CHAT})["tokens"]
        bare = _ok(c, "/tokenize", {"messages": CHAT, "add_generation_prompt": False})["tokens"]
        cont = _ok(c, "/tokenize", {"messages": CHAT, "add_generation_prompt": False,
                                    "continue_final_message": True})["tokens"]
        text = _ok(c, "/detokenize", {"tokens": full})["prompt"]
        assert text == srv.render_chat(CHAT), "messages are rendered by the chat endpoint's own template"
        assert full[:len(bare)] == bare and _ok(c, "/detokenize", {"tokens": full[len(bare):]})["prompt"] == \
            "<|assistant|>\n", "add_generation_prompt=false leaves out exactly the assistant cue"
        assert _ok(c, "/detokenize", {"tokens": cont})["prompt"].endswith("<|user|>\nagain"), \
            "continue_final_message ends where the last message's content ends"


@pytest.mark.given
def test_token_strs_are_the_exported_tokenizers(server, kit):
    """return_token_strs: each id's string as Hugging Face's convert_ids_to_tokens writes it for
    the exported tokenizer (hf_export.py: GPT-2's byte alphabet, "Ġ" a space), as vLLM serving
    that export would answer."""
    pytest.importorskip("tokenizers")  # hf_export builds the exported tokenizer with it
    exported = importlib.import_module(f"{srv.__name__}.hf_export").byte_tokenizer_json()
    with kit.client(server) as c:
        for text in TEXTS:
            out = _ok(c, "/tokenize", {"prompt": text, "return_token_strs": True})
            assert out["token_strs"] == [exported.id_to_token(i) for i in out["tokens"]], text
        out = _ok(c, "/tokenize", {"messages": CHAT[1:2], "return_token_strs": True})
        assert out["token_strs"][:3] == ["<", "|", "u"] and len(out["token_strs"]) == out["count"]
    every = list(range(257))
    tokenization = importlib.import_module(f"{srv.__name__}.tokenization")
    assert tokenization.token_strs(ByteTokenizer(), every) == [exported.id_to_token(i) for i in every]


BAD = [  # (path, body, status, param): each a 4xx naming the field the client must fix
    ("/tokenize", {"model": "gpt-4", "prompt": "a"}, 404, "model"),
    ("/detokenize", {"model": "gpt-4", "tokens": [1]}, 404, "model"),
    ("/tokenize", {"model": M}, 400, "prompt"),
    ("/tokenize", {"prompt": None}, 400, "prompt"),
    ("/tokenize", {"prompt": 5}, 400, "prompt"),
    ("/tokenize", {"prompt": [104, 105]}, 400, "prompt"),
    ("/tokenize", {"prompt": "a", "messages": CHAT}, 400, "messages"),
    ("/tokenize", {"prompt": "a", "add_special_tokens": 1}, 400, "add_special_tokens"),
    ("/tokenize", {"prompt": "a", "return_token_strs": "yes"}, 400, "return_token_strs"),
    ("/tokenize", {"prompt": "a", "add_generation_prompt": True}, 400, "add_generation_prompt"),
    ("/tokenize", {"prompt": "a", "temperature": 0}, 400, "temperature"),
    ("/tokenize", {"messages": []}, 400, "messages"),
    ("/tokenize", {"messages": [{"role": "robot", "content": "a"}]}, 400, "messages[0].role"),
    ("/tokenize", {"messages": CHAT, "continue_final_message": True}, 400, "continue_final_message"),
    ("/tokenize", [{"prompt": "a"}], 400, None),
    ("/detokenize", {"model": M}, 400, "tokens"),
    ("/detokenize", {"tokens": "hi"}, 400, "tokens"),
    ("/detokenize", {"tokens": [104, -1]}, 400, "tokens[1]"),
    ("/detokenize", {"tokens": [104, 1.0]}, 400, "tokens[1]"),
    ("/detokenize", {"tokens": [True]}, 400, "tokens[0]"),
    ("/detokenize", {"tokens": [104, 257]}, 400, "tokens[1]"),
    ("/detokenize", {"tokens": [10 ** 30]}, 400, "tokens[0]"),
    ("/detokenize", {"tokens": [1], "prompt": "a"}, 400, "prompt"),
]


@pytest.mark.given
def test_bad_bodies_are_openai_shaped_errors_naming_the_field(server, kit):
    with kit.client(server) as c:
        for path, body, status, param in BAD:
            r = c.post(path, json=body)
            assert r.status_code == status, f"POST {path} {body}: want {status}, got {r.status_code} {r.text}"
            err = r.json()["error"]
            assert set(err) == {"message", "type", "param", "code"}, err
            assert err["param"] == param, f"POST {path} {body}: the error must name {param!r}: {err}"
            if status == 404:
                assert err["code"] == "model_not_found", err
        r = c.post("/detokenize", json={"tokens": [104, 257]})
        assert "0..256" in r.json()["error"]["message"], "an id outside the vocabulary: the message names the range"
        r = c.post("/tokenize", content=b'{"prompt": "a"}', headers={"content-type": "text/plain"})
        assert r.status_code == 415, "like the generation endpoints: only a body declared JSON is read"
        assert c.post("/tokenize", content=b"{", headers={"content-type": "application/json"}).status_code == 400
        assert c.get("/tokenize").status_code == 405
    kit.assert_clean(server)
