"""Every engine on the real model (issue 30): SmolLM2-135M-Instruct in float32, greedy, 20 chat
prompts (10 questions, 10 code requests, rendered by `render_chat`: the file's ChatML with its
default system prompt) x 32 new tokens, all prompts at once, must give token for token what
`transformers`' `LlamaForCausalLM.generate` gives each prompt alone on the same float32 weights
(`Llama.to_hf()`), through:

- stage 04's `generate` (one ragged static batch of the 20 prompts, the preallocated cache);
- stage 05's `Engine` (continuous batching, the 20 requests submitted at once, prompt chunks
  under a 256-token budget, so prefills and decodes share steps);
- stage 06's `PagedEngine` (the same, blocks of 16, prefix caching on);
- stage 07's server over the PagedEngine, in this process, 20 `openai` clients at once (the
  text of the tokens up to the first `<|im_end|>`, where the server stops).

The oracle is stored: `smollm2_engines_golden.json` beside this file holds transformers'
tokens for each prompt, with the rendered prompt's ids, the GGUF file it was made from (size and
the hash of its first MiB), the transformers and torch versions, and along each greedy path the
gap between the top two logits (`min_gap`, and the step where it is smallest). transformers'
greedy decoding costs ~0.2-0.5 s a token on one thread of the course machine, 20 x 32 tokens
several minutes, so the test recomputes it live for two prompts only (a question and a code
request) and checks that the stored prompt ids are what the current tokenizer and template give.
Refresh it (after a change of prompts, weights, tokenizer or transformers) with

    COURSE_IMPL=solution python -m tests.test_smollm2_engines --refresh

which runs transformers' generate on every prompt alone, on one thread, and rewrites the file.
With a file other than the recorded one the tests skip, naming that command.

Near-ties: batching changes the shapes of the matrix products, so logits differ from the
prompt-alone run by float32 rounding. A greedy choice between two logits closer than that could
legitimately differ; the golden records each path's smallest gap, and a mismatch is reported
with the smallest gap of that prompt. Measured when this golden was made (torch 2.13 CPU, one
thread): the course's full forward of prompt + golden tokens equals transformers' logits
exactly (0.0 on prompts 0, 1, 16); the 20 sequences in one ragged `forward_cached` call differ
from each run alone by at most 5.1e-5 (logits up to ~44 in size); the smallest top-2 gap on any
greedy path is 0.0133 (prompt 16, step 29; next 0.0150, prompt 1, step 19), 260 times that.
So no prompt is exempt, and a difference is a bug, not a near-tie.

The model is loaded once for the module (~6 s), and every engine runs on one torch thread
(two xdist workers share the course machine's two cores).
"""

from __future__ import annotations

import hashlib
import json
import sys
from functools import cache
from pathlib import Path

import pytest

GOLDEN = Path(__file__).with_name("smollm2_engines_golden.json")
MAX_NEW = 32
LIVE = (0, 10)  # the prompts transformers recomputes in the test: the first question, the first code request
REFRESH = "COURSE_IMPL=solution python -m tests.test_smollm2_engines --refresh"

CHAT = (
    "What is the capital of France?",
    "Explain photosynthesis in two sentences.",
    "Why is the sky blue?",
    "Give me three tips for sleeping better.",
    "What is the difference between weather and climate?",
    "How do vaccines work?",
    "Summarise the plot of Romeo and Juliet.",
    "What causes the seasons on Earth?",
    "Name three uses of machine learning in medicine.",
    "How should I prepare for a job interview?",
)
CODE = (
    "Write a Python function that reverses a string.",
    "Write a Python function to check whether a number is prime.",
    "How do I read a CSV file with pandas?",
    "Write a SQL query that counts the rows of a table named users.",
    "Write a JavaScript function that returns the largest number in an array.",
    "Explain what a Python list comprehension is, with an example.",
    "Write a Python function that computes the factorial of n recursively.",
    "How do I sort a dictionary by its values in Python?",
    "Write a bash command that counts the lines of every .py file in a folder.",
    "Fix this Python code: def add(a, b) return a + b",
)
PROMPTS = CHAT + CODE


def file_key(path) -> str:
    """The GGUF file's size and the SHA-256 of its first MiB (as 04_kv_cache/tests/test_smollm2.py)."""
    with open(path, "rb") as f:
        head = f.read(1 << 20)
    return f"{Path(path).stat().st_size}:{hashlib.sha256(head).hexdigest()[:16]}"


@cache
def _load():
    """(model, tokenizer, prompt ids, file key): SmolLM2 in float32, read once."""
    from solutions.kv_cache import load_smollm2, read_gguf, render_chat, smollm2_path

    path = smollm2_path()
    gguf = read_gguf(path)
    model, tok = load_smollm2(path=path)
    ids = [tok.encode(render_chat([{"role": "user", "content": text}], gguf)) for text in PROMPTS]
    return model, tok, ids, file_key(path)


def hf_greedy(hf, ids: list[int]) -> tuple[list[int], list[float]]:
    """transformers' greedy `generate` of one prompt alone (no stop: MAX_NEW tokens): the new
    tokens and, at each step, the gap between the two largest logits."""
    import torch

    x = torch.tensor([ids])
    with torch.no_grad():
        out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_NEW, min_new_tokens=MAX_NEW,
                          do_sample=False, use_cache=True, pad_token_id=2, eos_token_id=None,
                          output_scores=True, return_dict_in_generate=True)
    gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores]
    return out.sequences[0, len(ids):].tolist(), gaps


def to_hf(model):
    """The same float32 weights as transformers' LlamaForCausalLM (`Llama.to_hf`), which stops
    at no token: every prompt gets MAX_NEW tokens."""
    hf = model.to_hf()
    hf.generation_config.eos_token_id = None
    return hf


def refresh() -> None:
    import torch
    import transformers

    torch.set_num_threads(1)
    model, _, ids, key = _load()
    hf = to_hf(model)
    rows = []
    for i, (text, prompt) in enumerate(zip(PROMPTS, ids)):
        tokens, gaps = hf_greedy(hf, prompt)
        step = min(range(len(gaps)), key=gaps.__getitem__)
        rows.append({"prompt": text, "ids": prompt, "tokens": tokens, "min_gap": round(gaps[step], 6),
                     "min_gap_step": step})
        print(f"{i:2d} {len(prompt):3d} ids, min gap {gaps[step]:.4f} at step {step}", flush=True)
    head = {"file": key, "transformers": transformers.__version__, "torch": torch.__version__,
            "max_new_tokens": MAX_NEW, "made_by": REFRESH}
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]  # one prompt a line
    lines += [' "prompts": [', ",\n".join("  " + json.dumps(r) for r in rows), " ]"]
    GOLDEN.write_text("{\n" + "\n".join(lines) + "\n}\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")


# ---- the tests ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real():
    """(model, tokenizer, prompt ids, golden rows), on one torch thread for the module."""
    import torch

    try:
        model, tok, ids, key = _load()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    if not GOLDEN.exists():
        pytest.skip(f"{GOLDEN.name} is missing: {REFRESH}")
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    if golden["file"] != key:
        pytest.skip(f"{GOLDEN.name} was made from another GGUF file ({golden['file']}, this one is {key}): {REFRESH}")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield model, tok, ids, golden["prompts"]
    torch.set_num_threads(before)


def check_table(got: list[list[int]], rows: list[dict], tok, who: str) -> None:
    """Every prompt's tokens equal transformers' (golden); the message names the first
    differing step and the gap transformers had between its top two logits there."""
    bad = []
    for i, (mine, row) in enumerate(zip(got, rows)):
        if mine != row["tokens"]:
            step = next((t for t, (a, b) in enumerate(zip(mine, row["tokens"])) if a != b), min(len(mine), MAX_NEW))
            bad.append(f"prompt {i} ({row['prompt']!r}): differs from step {step} on: {tok.decode(mine[step:])!r} "
                       f"instead of {tok.decode(row['tokens'][step:])!r} (its smallest top-2 logit gap: "
                       f"{row['min_gap']} at step {row['min_gap_step']})")
    assert len(got) == len(rows) and not bad, (
        f"{who}: {len(bad)} of {len(rows)} prompts differ from transformers' greedy generate of each alone on the "
        f"same float32 weights:\n" + "\n".join(bad))


def test_the_golden_is_this_tokenizers_and_transformers_live(real):
    """The stored prompt ids are what `render_chat` + the tokenizer give now, and transformers
    recomputed live gives the stored tokens for two prompts (a question, a code request)."""
    model, tok, ids, rows = real
    assert [r["prompt"] for r in rows] == list(PROMPTS), f"the prompts changed: {REFRESH}"
    assert [r["ids"] for r in rows] == ids, f"the rendered prompts tokenize differently now: {REFRESH}"
    assert all(len(r["tokens"]) == MAX_NEW for r in rows)
    hf = to_hf(model)
    for i in LIVE:
        tokens, _ = hf_greedy(hf, ids[i])
        assert tokens == rows[i]["tokens"], (
            f"prompt {i} ({PROMPTS[i]!r}): transformers now generates {tok.decode(tokens)!r}, the golden holds "
            f"{tok.decode(rows[i]['tokens'])!r}: the weights, transformers or torch changed; {REFRESH}")


def test_generate_all_prompts_at_once_equals_transformers(real):
    """Stage 04's `generate`: the 20 prompts in one ragged batch."""
    from solutions.kv_cache import generate

    model, tok, ids, rows = real
    check_table(generate(model, ids, MAX_NEW).tokens, rows, tok, "stage 04's generate (one ragged batch)")


def _serve(engine, ids) -> list[list[int]]:
    from solutions.batching import Request

    reqs = [engine.add_request(Request(prompt, MAX_NEW)) for prompt in ids]
    while engine.has_unfinished():
        engine.step()
    return [r.output for r in reqs]


def test_batching_engine_equals_transformers(real):
    """Stage 05's `Engine`: every request submitted at once, prompt chunks under a budget."""
    from solutions.batching import ContinuousBatching, Engine, ManualClock

    model, tok, ids, rows = real
    max_len = max(map(len, ids)) + MAX_NEW
    engine = Engine(model, ContinuousBatching(len(ids), max_tokens_per_step=256), max_len=max_len,
                    clock=ManualClock())
    check_table(_serve(engine, ids), rows, tok, "stage 05's Engine (20 requests at once, 256 tokens a step)")


def test_paged_engine_equals_transformers(real):
    """Stage 06's `PagedEngine`: the same, on blocks of 16 with prefix caching."""
    from solutions.batching import ContinuousBatching, ManualClock
    from solutions.paged import PagedEngine

    model, tok, ids, rows = real
    max_len = max(map(len, ids)) + MAX_NEW
    engine = PagedEngine(model, ContinuousBatching(len(ids), max_tokens_per_step=256), block_size=16,
                         max_len=max_len, clock=ManualClock())
    check_table(_serve(engine, ids), rows, tok, "stage 06's PagedEngine (20 requests at once, blocks of 16)")


def test_http_with_concurrent_clients_equals_transformers(real):
    """Stage 07's server over the PagedEngine, in this process: 20 unmodified `openai` clients
    at once, each a chat of one user message (the server renders it with the file's template,
    as the golden's prompts were), greedy, max_tokens 32. Each answer is the text of
    transformers' tokens up to its first `<|im_end|>` (where the server stops, finish "stop";
    else "length"), special tokens written as no text, as the server streams them."""
    from concurrent.futures import ThreadPoolExecutor

    import openai

    from solutions.kv_cache import read_gguf, smollm2_path
    from solutions.server import ServerConfig, make_engine, serve_in_thread
    from solutions.server.served_model import bpe_tokenizer

    model, tok, ids, rows = real
    served = bpe_tokenizer(tok, read_gguf(smollm2_path()))
    eos = served.text.eos_id
    engine = make_engine(model, max_batch_size=len(ids), max_tokens_per_step=256, num_blocks=160)
    with serve_in_thread(engine, served, ServerConfig(model_name="smollm2"), start_timeout=60.0) as h:
        client = openai.OpenAI(base_url=f"{h.url}/v1", api_key="unused", max_retries=0, timeout=300)

        def ask(question: str):
            return client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": question}],
                                                  max_tokens=MAX_NEW, temperature=0).choices[0]

        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            answers = list(pool.map(ask, PROMPTS))
    bad = []
    for i, (choice, row) in enumerate(zip(answers, rows)):
        tokens = row["tokens"][:row["tokens"].index(eos)] if eos in row["tokens"] else row["tokens"]
        want = b"".join(served.text.token_bytes[t] for t in tokens).decode("utf-8", errors="replace")
        reason = "stop" if eos in row["tokens"] else "length"
        if (choice.message.content, choice.finish_reason) != (want, reason):
            bad.append(f"prompt {i} ({row['prompt']!r}): {choice.message.content!r} ({choice.finish_reason}) "
                       f"instead of {want!r} ({reason})")
    assert not bad, ("stage 07's server, 20 concurrent clients: answers differ from transformers' greedy tokens "
                     "of each prompt alone:\n" + "\n".join(bad))

if __name__ == "__main__":
    if sys.argv[1:] == ["--refresh"]:
        refresh()
    else:
        sys.exit(f"usage: {REFRESH}")
