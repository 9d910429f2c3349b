"""Tests of stage 07's given code (not graded): the 413 limit, OpenAI-shaped 404/405,
the API key (also on /tokenize and /detokenize), `request_blocks`, and the command line's bad arguments."""

from __future__ import annotations

import pytest

import course

srv = course.load("server")
M = "course-gpt"


@pytest.mark.given
def test_too_large_body_is_413(server, kit):
    with kit.client(server) as c:
        r = c.post("/v1/completions", content=b"x" * (2 << 20), headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        assert c.get("/health").status_code == 200


@pytest.mark.given
def test_unknown_path_and_method_are_openai_shaped(server, kit):
    with kit.client(server) as c:
        r = c.get("/v1/nothing")
        assert r.status_code == 404 and "message" in r.json()["error"]
        r = c.get("/v1/completions")
        assert r.status_code == 405 and "message" in r.json()["error"]
        models = c.get("/v1/models").json()
        assert models["object"] == "list" and models["data"][0]["id"] == M


@pytest.mark.given
def test_api_key_required_when_set(start, kit):
    import openai

    h = start(api_key="s3cret")
    with kit.client(h) as c:
        for path in ("/v1/models", "/v1/completions", "/tokenize", "/detokenize"):
            r = c.request("GET" if "models" in path else "POST", path, json={"model": M, "prompt": "a"})
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", (path, r.text)
        assert c.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/health").status_code == 200, "only /v1/* and the tokenizer endpoints need the key"
        key = {"Authorization": "Bearer s3cret"}
        assert c.post("/tokenize", json={"prompt": "ab"}, headers=key).json()["tokens"] == [97, 98]
        assert c.post("/detokenize", json={"tokens": [97, 98]}, headers=key).json() == {"prompt": "ab"}
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{h.url}/v1", api_key="wrong", max_retries=0).models.list()
    good = openai.OpenAI(base_url=f"{h.url}/v1", api_key="s3cret", max_retries=0)
    assert [m.id for m in good.models.list()] == [M]


@pytest.mark.given
def test_request_blocks_shares_full_prompt_blocks():
    assert srv.request_blocks(16, 16, 1, 16) == 2
    assert srv.request_blocks(17, 15, 1, 16) == 2
    assert srv.request_blocks(17, 16, 1, 16) == 3
    # n = 3: the one full prompt block is shared; each sequence owns the rest
    assert srv.request_blocks(20, 20, 3, 16) == 1 + 3 * 2


@pytest.mark.given
@pytest.mark.parametrize("args", [["--port", "70000"], ["--model", "/no/such/model.pt"], ["--timeout", "-1"],
                                  ["--max-batch-size", "0"], ["--max-queue-wait", "-1"], ["--max-queue-wait", "nan"]])
def test_cli_bad_arguments_exit_2(args, capsys):
    assert srv.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
