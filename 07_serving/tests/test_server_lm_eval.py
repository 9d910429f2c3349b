"""lm-eval against the server (issue 30): its `local-completions` model asks loglikelihoods as
`{"prompt": [token ids], "logprobs": 1, "echo": true, "max_tokens": 1, "temperature": 0}`
and tokenizes through the server (`tokenizer_backend=remote`: GET /tokenizer_info, then
POST /tokenize and /detokenize), on the multiple-choice task lm_eval_stdlib.py builds.

lm-eval is not one of the course's dependencies (it pulls ~40 packages: datasets, pandas,
pyarrow, scikit-learn, ...); the README says how to install it beside the course and the
command run against SmolLM2. Here: the task's construction and /tokenizer_info. lm-eval's own
run against a server is tests/test_lm_eval_server.py (the maintainers' suite, skipped where
lm-eval is not installed: a stage test that skips would keep the reference from full marks).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("_stage07_lm_eval_stdlib", Path(__file__).with_name("lm_eval_stdlib.py"))
task = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(task)
CHOICES, TASK, build, documents = task.CHOICES, task.TASK, task.build, task.documents

pytestmark = pytest.mark.given


def test_the_task_is_built_reproducibly(tmp_path):
    a, b = build(tmp_path / "a"), build(tmp_path / "b")
    data_a, data_b = (p.with_suffix(".jsonl").read_bytes() for p in (a, b))
    assert data_a == data_b, "the same interpreter must build the same documents, byte for byte"
    docs = [json.loads(line) for line in data_a.decode().splitlines()]
    assert docs == documents() and len(docs) >= 40
    for d in docs:
        assert len(set(d["choices"])) == CHOICES and 0 <= d["answer"] < CHOICES
        assert d["choices"][d["answer"]] not in d["question"].lower().split(), "the question must not name its answer"
    assert f"task: {TASK}" in a.read_text()


def test_tokenizer_info_is_what_lm_evals_remote_tokenizer_reads(server, kit):
    http = kit.client(server)
    info = http.get("/tokenizer_info").json()
    assert info["eos_token"] == "<|endoftext|>" and info["model_max_length"] == kit.CONTEXT, info
    tokens = http.post("/tokenize", json={"prompt": "abc", "add_special_tokens": False}).json()["tokens"]
    assert tokens == [97, 98, 99]
    assert http.post("/detokenize", json={"tokens": tokens}).json()["prompt"] == "abc"
