"""The course's default model for the engines of stages 05-08, and the stage's demo: one
trace served by every policy."""

from __future__ import annotations

import abc
import time
from pathlib import Path

import torch

from solutions.gpt import DEFAULT_WEIGHTS, GPT, GPTConfig, load_default, on_one_thread
from solutions.kv_cache import generate
from solutions.kv_cache.demo import QUESTIONS, chat_ids, smollm2_for_demo
from solutions.tokenizer import ByteTokenizer
from solutions.workload import make_trace

from .continuous import ContinuousBatching
from .dynamic import DynamicBatching
from .engine import Engine
from .metrics import format_table
from .replay import serve
from .request import Request
from .static import StaticBatching


def default_model(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> tuple[GPT, str]:
    """(the course's default model on `device` in `dtype`, its description), or — while it
    has not been trained — a random-init model of the same shape (seed 0), which batches
    exactly the same way."""
    if DEFAULT_WEIGHTS.exists():
        model, _ = load_default(device=device, dtype=dtype)
        return model, "the course's default model"
    torch.manual_seed(0)
    return (GPT(GPTConfig()).to(device=device, dtype=dtype).eval(),
            f"a random-init GPT (seed 0; {DEFAULT_WEIGHTS.name} is not trained yet)")


@on_one_thread
def demo(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> None:
    """Serve one trace with static, dynamic and continuous batching (the course's model on
    `device`, in `dtype`), and compare; then SmolLM2-135M-Instruct (where installed) answering
    a few chat requests at once through the continuous-batching Engine."""
    torch.manual_seed(0)
    model, what = default_model(device, dtype)
    tok = ByteTokenizer()
    text = Path(abc.__file__).read_text(encoding="utf-8")  # prompts cut from real Python source
    trace = make_trace(24, profile="mix", rate=100.0, seed=0, source=tok.encode(text))
    print(f"model: {what}, {model.num_params():,} parameters; 1 torch thread")
    print(f"trace: {trace.describe()}\n")
    runs = {}
    for scheduler in (StaticBatching(8), DynamicBatching(8, max_wait_ms=20), ContinuousBatching(8),
                      ContinuousBatching(8, max_tokens_per_step=32)):
        runs[scheduler.name] = serve(model, trace, scheduler)
    alone = [generate(model, [list(r.prompt)], r.max_new_tokens).tokens[0] for r in runs["static"].requests]
    summaries = {name: run.summary() for name, run in runs.items()}
    print(format_table(summaries))
    ratio = summaries["continuous"]["tokens_per_s"] / summaries["static"]["tokens_per_s"]
    print(f"\ntimes in ms; occupancy = rows doing work / 8. continuous / static throughput: {ratio:.2f}x")
    same = all([r.output for r in run.requests] == alone for run in runs.values())
    print(f"every policy gave every request the tokens stage 04's generate gives it alone: {same}")
    if not same and dtype not in (torch.float32, torch.float64):
        print(f"({str(dtype).replace('torch.', '')} keeps 8-11 significant bits: a batch rounds differently from "
              "a request alone, and where the top two logits nearly tie the choice may go either way)")
    smollm2_batch(device, dtype)


def smollm2_batch(device: str | torch.device, dtype: torch.dtype, max_new_tokens: int = 48) -> None:
    """kv_cache.demo's QUESTIONS, greedy, submitted at once to the continuous-batching Engine
    on SmolLM2-135M-Instruct (where installed): each answer, then the batch's tokens/s."""
    print()
    real = smollm2_for_demo(device, dtype)
    if real is None:
        return
    print("SmolLM2-135M-Instruct, the same Engine (continuous batching), "
          f"{len(QUESTIONS)} chat requests at once, greedy, up to {max_new_tokens} new tokens each:")
    model, tok, gguf = real
    prompts = [chat_ids(tok, gguf, q) for q in QUESTIONS]
    eos = int(gguf.metadata["tokenizer.ggml.eos_token_id"])
    engine = Engine(model, ContinuousBatching(len(prompts)), max_len=max(map(len, prompts)) + max_new_tokens)
    t0 = time.perf_counter()
    requests = [engine.add_request(Request(p, max_new_tokens, stop=[eos])) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    secs = time.perf_counter() - t0
    for question, r in zip(QUESTIONS, requests):
        print(f"> {question}\n{tok.decode(r.output)}  [{len(r.output)} tokens, {r.finish_reason}]")
    n = sum(len(r.output) for r in requests)
    print(f"{n} tokens in {secs:.1f} s = {n / secs:.1f} tokens/s over {len(engine.steps)} steps "
          f"(prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens; 1 torch thread)")
