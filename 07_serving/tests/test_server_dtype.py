"""The server on a chosen device and dtype: `course serve --dtype bfloat16` serves the
default model through the unmodified `openai` client, and its greedy answers are float32's
wherever float32's choice is not a near-tie; `--device cuda` without CUDA and a bad dtype
name exit 2 with `error: ...`.

Where bfloat16 must agree with float32, and where it need not: bfloat16 keeps 8 significant
bits, so the default model's logits (|logit| <= ~20) move by up to ~0.12 (stage 05's
test_batching_dtype.py measures it). Greedy can pick another token only where float32's top
two logits are closer than twice that error; from the first such near-tie on the two
continuations may part (different contexts), and before it they must be identical.
TOLERANCE = 0.5 logits is four times the measured error.
"""

from __future__ import annotations

import openai
import pytest
import torch

import course
from solutions.device import greedy_margins, must_agree
from solutions.gpt import load_default
from solutions.kv_cache import generate
from solutions.tokenizer import EOT

srv = course.load("server")
M = "course-gpt"
PROMPTS = ["def fibonacci(n):\n", "import os\n", "for i in range(10):\n"]
N = 16
TOLERANCE = 0.5


def agreed_with_float32(online: list[str]) -> list[list[int]]:
    """Each answer's tokens up to float32's first near-tie, asserted equal to float32's
    `generate`; and that prefix is most of the answer."""
    model, tok = load_default()
    agreed = []
    for p, text in zip(PROMPTS, online):
        ids = tok.encode(p)
        ref = generate(model, [ids], N, stop=[EOT]).tokens[0]
        k = must_agree(greedy_margins(model, ids, ref), TOLERANCE)
        got = tok.encode(text)
        assert got[:k] == ref[:k], f"{p!r}: bfloat16 {got} vs float32 {ref}; they must agree on the first {k}"
        agreed.append(got[:k])
    assert sum(map(len, agreed)) >= 0.75 * N * len(PROMPTS), \
        f"only {sum(map(len, agreed))} tokens were comparable: the prompts are near-ties"
    return agreed


def completions(url: str) -> list[str]:
    """PROMPTS' greedy completions through the unmodified `openai` client (the second streamed)."""
    oai = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=240)
    online = []
    for i, p in enumerate(PROMPTS):
        kw = dict(model=M, prompt=p, max_tokens=N, temperature=0)
        if i == 1:
            online.append("".join(ch.choices[0].text for ch in oai.completions.create(**kw, stream=True)
                                  if ch.choices))
        else:
            online.append(oai.completions.create(**kw).choices[0].text)
    return online


@pytest.mark.exercise("7.5")
def test_a_bfloat16_server_answers_float32s_greedy_tokens(start):
    """The server (in this process) on the default model in bfloat16: three greedy completions
    (one streamed) through the `openai` client, each equal to float32's `generate` up to
    float32's first near-tie. (`course serve --dtype bfloat16` in its own process, the same
    answers: the held-out test_course_serve_in_bfloat16_answers_float32s_greedy_tokens.)"""
    model, _ = load_default(dtype=torch.bfloat16)
    agreed_with_float32(completions(start(model=model).url))


@pytest.mark.exercise("7.5")
def test_the_server_engine_holds_its_kv_blocks_in_the_models_dtype(start, kit):
    """The engine behind the server (make_engine) on a bfloat16 model: its paged K/V pools
    are bfloat16 on the model's device, and a greedy answer over HTTP comes back."""
    model, _ = load_default(dtype=torch.bfloat16)
    engine = srv.make_engine(model, max_batch_size=4)
    assert engine.cache.k.dtype == torch.bfloat16 and engine.cache.v.dtype == torch.bfloat16
    assert engine.cache.k.device == model.transformer.wte.weight.device
    h = start(model=model)
    with kit.client(h, timeout=30) as http:
        r = http.post("/v1/completions", json={"model": M, "prompt": "import os\n", "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1


@pytest.mark.given
@pytest.mark.parametrize("args, says", [
    (["--dtype", "fp8"], "--dtype must be one of float32, float16, bfloat16, got 'fp8'"),
    (["--device", "tpu"], "--device must be one of cpu, cuda"),
    pytest.param(["--device", "cuda"], "CUDA is not available here",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
])
def test_server_cli_refuses_a_device_or_dtype_it_cannot_run(args, says, capsys):
    assert srv.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and "Traceback" not in err
