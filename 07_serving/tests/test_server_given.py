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
            assert r.headers.get("x-request-id"), "a 401 carries the request id too"
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


# ---- an operator's conventions (issue "Serving as a service"): request ids, the API key
# ---- kept off argv, /version and --version, help for every option

@pytest.mark.given
def test_a_request_id_is_honoured_made_and_sent_back_on_every_response(server, kit):
    """`X-Request-Id`: the client's comes back; without one the server makes one; errors
    carry it too; a malformed one is OpenAI's 400 naming the header, with a fresh id.
    (That it names the response and the log line: test_server_api_compat.py, 7.5.)"""
    import re

    hex32 = re.compile(r"[0-9a-f]{32}")
    with kit.client(server) as c:
        r = c.post("/tokenize", json={"prompt": "ab"}, headers={"X-Request-Id": "job-7"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "job-7", (r.status_code, r.headers)
        for resp in (c.get("/health"), c.get("/v1/nothing"), c.post("/v1/completions", json={"prompt": 1}),
                     c.get("/v1/models")):
            assert hex32.fullmatch(resp.headers.get("x-request-id", "")), (resp.url, resp.headers)
        assert c.get("/v1/models").headers["x-request-id"] != resp.headers["x-request-id"], "one id a request"
        for wrong in (b"two words", b"x" * 129, "caf\u00e9".encode(), b""):
            r = c.get("/v1/models", headers={"X-Request-Id": wrong})
            err = r.json()["error"]
            assert r.status_code == 400 and err["param"] == "X-Request-Id", (wrong, r.status_code, r.text)
            assert hex32.fullmatch(r.headers["x-request-id"]), r.headers


@pytest.mark.given
def test_the_api_key_comes_from_the_option_a_file_or_the_environment(tmp_path, capsys):
    """--api-key-file's first line, else --api-key, else COURSE_API_KEY (off argv, where `ps`
    shows it); both options, an unreadable file or an empty key: exit 2 naming the option."""
    cli = srv.cli
    args = cli._parser("x").parse_args
    key = tmp_path / "key.txt"
    key.write_text("  s3cret \nsecond line\n", encoding="utf-8")
    assert cli.api_key(args(["--api-key-file", str(key)]), {}) == "s3cret"
    assert cli.api_key(args([]), {cli.API_KEY_ENV: "from-env"}) == "from-env"
    assert cli.api_key(args(["--api-key", "k"]), {cli.API_KEY_ENV: "from-env"}) == "k"
    assert cli.api_key(args([]), {}) is None
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    for argv, env, named in ((["--api-key", "a", "--api-key-file", str(key)], {}, "--api-key-file"),
                             (["--api-key-file", str(tmp_path / "none.txt")], {}, "none.txt"),
                             (["--api-key-file", str(tmp_path / "empty.txt")], {}, "must not be empty"),
                             ([], {cli.API_KEY_ENV: " "}, cli.API_KEY_ENV)):
        with pytest.raises(ValueError, match=named):
            cli.api_key(args(argv), env)
    assert srv.main(["--api-key-file", str(tmp_path / "none.txt")]) == 2
    assert "error: --api-key-file" in capsys.readouterr().err


@pytest.mark.given
def test_version_and_help_for_every_option(server, kit, capsys):
    import argparse

    with kit.client(server) as c:
        version = c.get("/version").json()["version"]
    assert version and version == srv.operations.server_version()
    with pytest.raises(SystemExit) as done:
        srv.cli._parser("serve").parse_args(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"serve {version}"
    quiet = [a.option_strings for a in srv.cli._parser("serve")._actions
             if not a.help or a.help == argparse.SUPPRESS]
    assert not quiet, f"options without help text: {quiet}"


@pytest.mark.given
def test_the_grafana_dashboard_reads_only_metrics_the_server_exports(server, kit):
    """07_serving/grafana_dashboard.json: every panel's query (and the model variable's)
    names only series that /metrics exports, every panel has one, and no `*_created` series
    is exported (vLLM disables them)."""
    import json
    import re
    from pathlib import Path

    with kit.client(server) as c:
        text = c.get("/metrics").text
    exported = {ln.split("{")[0].split(" ")[0] for ln in text.splitlines() if ln and not ln.startswith("#")}
    assert not [n for n in exported if n.endswith("_created")], sorted(exported)
    dash = json.loads((Path(__file__).parents[1] / "grafana_dashboard.json").read_text(encoding="utf-8"))
    queries = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    queries += [v["query"] for v in dash["templating"]["list"]]
    assert len(dash["panels"]) >= 12 and all(p["targets"] for p in dash["panels"])
    named = {n for q in queries for n in re.findall(r"vllm:[A-Za-z0-9_:]+", q)}
    assert named and not named - exported, f"queries name series /metrics lacks: {sorted(named - exported)}"
    families = {n.removesuffix("_bucket") for n in named if n.endswith("_bucket")}
    for new in ("iteration_tokens_total", "request_prompt_tokens", "request_generation_tokens",
                "request_params_n", "request_params_max_tokens", "request_inference_time_seconds"):
        assert f"vllm:{new}" in families or f"vllm:{new}_sum" in named, f"no panel reads vllm:{new}"


@pytest.mark.given
def test_cors_is_opt_in_and_keeps_the_json_guard(start, server, kit, capsys):
    """Without --allowed-origins a browser's preflight gets 405 (no CORS); with it, an allowed
    origin's preflight passes (even under an API key: a preflight carries none) and its page
    reads X-Request-Id, another origin is refused, and a body not declared JSON is still 415."""
    pre = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization,content-type"}
    with kit.client(server) as c:
        assert c.options("/v1/completions", headers=pre).status_code == 405
    h = start(allowed_origins=("http://localhost:3000",), api_key="k")
    with kit.client(h) as c:
        r = c.options("/v1/completions", headers=pre)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000", r.headers
        assert c.options("/v1/completions", headers={**pre, "Origin": "http://evil.example"}).status_code == 400
        r = c.get("/v1/models", headers={"Origin": "http://localhost:3000", "Authorization": "Bearer k"})
        assert r.status_code == 200 and "x-request-id" in r.headers["access-control-expose-headers"].lower()
        r = c.post("/v1/completions", content=b'{"prompt": "a"}', headers={
            "Origin": "http://localhost:3000", "Authorization": "Bearer k", "Content-Type": "text/plain"})
        assert r.status_code == 415, r.text
    assert srv.main(["--allowed-origins", "localhost:3000"]) == 2
    assert "error: --allowed-origins" in capsys.readouterr().err


@pytest.mark.given
def test_every_log_line_of_the_process_is_one_json_object():
    """`--log-format json` (the default): the server's lines and uvicorn's are each one JSON
    object (time, level, logger, message); a request's log line has its keys merged in (still
    a request log line for stage 08's parser); an exception's traceback is kept."""
    import io
    import json
    import logging

    root, uv = logging.getLogger(), [logging.getLogger(n) for n in ("uvicorn", "uvicorn.error", "uvicorn.access")]
    saved = (root.handlers[:], root.level, [(lg.handlers[:], lg.propagate, lg.level) for lg in uv])
    out = io.StringIO()
    try:
        srv.json_logs.configure_logging("json", stream=out)
        logging.getLogger("uvicorn.error").info("Uvicorn running on http://127.0.0.1:%d", 8000)
        logging.getLogger("course.server").info(json.dumps({"request_id": "cmpl-a", "output_tokens": 3}))
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("course.server").exception("handler error (request %s)", "a")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        for lg, (handlers, propagate, level) in zip(uv, saved[2]):
            lg.handlers[:], lg.propagate = handlers, propagate
            lg.setLevel(level)
    lines = [json.loads(ln) for ln in out.getvalue().splitlines()]
    assert [ln["logger"] for ln in lines] == ["uvicorn.error", "course.server", "course.server"], lines
    assert lines[0]["message"] == "Uvicorn running on http://127.0.0.1:8000" and lines[0]["level"] == "INFO"
    assert lines[0]["time"].endswith("Z") and lines[1]["message"] == "request finished"
    assert {k: lines[1][k] for k in ("request_id", "output_tokens")} == {"request_id": "cmpl-a", "output_tokens": 3}
    assert lines[2]["level"] == "ERROR" and "ValueError: boom" in lines[2]["exc_info"]


@pytest.mark.given
def test_the_request_log_never_waits_on_its_sink(tmp_path):
    """The request log is written by a thread of its own (log_writer.py): `write` returns while
    the console's sink is stuck, and the lines come out in order, to the logger and the file,
    once it moves (`flush` waits for them; `close` writes what is queued)."""
    import logging
    import threading

    gate, seen = threading.Event(), []

    class Stuck(logging.Handler):  # a saturated disk, a terminal nobody reads
        def emit(self, record):
            gate.wait(60)
            seen.append(record.getMessage())

    sink = logging.Logger("course.server")
    sink.addHandler(Stuck())
    path = tmp_path / "requests.jsonl"
    w = srv.log_writer.RequestLogWriter(sink, str(path))
    try:
        wrote = threading.Event()
        threading.Thread(target=lambda: ([w.write(f'{{"n": {i}}}') for i in range(3)], wrote.set())).start()
        assert wrote.wait(30), "write() waited for a stuck sink: the log must stay off the engine's path"
        assert seen == [] and path.read_text(encoding="utf-8") == ""
        gate.set()
        w.flush()
        assert seen == ['{"n": 0}', '{"n": 1}', '{"n": 2}'] and path.read_text(encoding="utf-8").splitlines() == seen
        w.write('{"n": 3}')
    finally:
        gate.set()
        w.close()
    assert path.read_text(encoding="utf-8").splitlines()[-1] == '{"n": 3}', "close() writes what is queued"
