# GENERATED from solutions/paged/demo.py by `course stubs --write`.
# Nothing to write here: given code of stage 06 (06_paged_attention/06_paged_attention.ipynb).
"""The stage's demo (given): requests sharing a system prompt, contiguous vs paged memory."""

from __future__ import annotations

import time

import torch

from solutions.batching import ContinuousBatching, Engine, Request, default_model
from solutions.gpt import on_one_thread
from solutions.kv_cache import generate
from solutions.kv_cache.demo import QUESTIONS, chat_ids, smollm2_for_demo

from .engine import PagedEngine


@on_one_thread
def demo(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> None:
    """Serve requests sharing a system prompt on paged memory (the course's model on `device`,
    in `dtype`); print utilisation and hits. Then SmolLM2-135M-Instruct (where installed): chat
    requests sharing its chat template's system prompt, on paged memory with prefix caching."""
    from solutions.batching import ManualClock, replay
    from solutions.tokenizer import ByteTokenizer
    from solutions.workload import Trace, TraceRequest

    model, what = default_model(device, dtype)
    tok = ByteTokenizer()
    system = tok.encode("# You are a careful Python programmer. Answer with code only.\n")
    tasks = ["def fibonacci(n):\n", "import os\n", "class Stack:\n    def push(self", "def read_lines(path):\n",
             "for i in range(10):\n", "with open(", "def main():\n", "try:\n    import json\n"]
    trace = Trace(tuple(TraceRequest(0.01 * i, tuple(system + tok.encode(t)), 24) for i, t in enumerate(tasks * 2)))
    print(f"model: {what}; 1 torch thread")
    print(f"{len(trace)} requests, each = the same {len(system)}-token system prompt + a task, 24 new tokens\n")
    runs = {}
    for name, make in (("stage 05 contiguous", lambda c: Engine(model, ContinuousBatching(8), clock=c)),
                       ("paged, no prefix cache", lambda c: PagedEngine(model, ContinuousBatching(8), clock=c,
                                                                        enable_prefix_caching=False, num_blocks=48)),
                       ("paged + prefix cache", lambda c: PagedEngine(model, ContinuousBatching(8), clock=c,
                                                                      num_blocks=48))):
        clock = ManualClock()
        engine = make(clock)
        peak = {"usage": 0.0, "filled": 0, "slots": 0, "running": 0}
        inner = engine.step

        def step(engine=engine, inner=inner, peak=peak):
            out = inner()
            if isinstance(engine, PagedEngine):
                filled, slots = engine.cache.slot_usage()
                peak["usage"] = max(peak["usage"], engine.kv_usage())
            else:
                running = engine.scheduler.running
                filled, slots = int(engine.cache.lengths.sum()), len(running) * engine.max_len
            peak["filled"] += filled
            peak["slots"] += slots
            peak["running"] = max(peak["running"], len(engine.scheduler.running))
            return out

        engine.step = step
        t0 = time.perf_counter()
        result = replay(engine, trace, sleep=clock.sleep, step_time=0.01)
        runs[name] = (engine, result, peak, time.perf_counter() - t0)
    base = [r.output for r in runs["stage 05 contiguous"][1].requests]
    contiguous = runs["stage 05 contiguous"][0]
    print(f"KV memory: stage 05 reserves 8 rows x {contiguous.max_len} positions = "
          f"{8 * contiguous.max_len} tokens; the paged engines get 48 blocks x 16 = 768 tokens\n")
    for name, (engine, _result, peak, secs) in runs.items():
        util = peak["filled"] / max(1, peak["slots"])
        line = (f"{name:>24}: {secs:5.2f} s, peak running {peak['running']}, "
                f"allocated KV slots holding real tokens {util:4.0%}")
        if isinstance(engine, PagedEngine):
            prefill = sum(s.prefill_tokens for s in engine.steps)
            line += (f"\n{'':>26}peak KV usage {peak['usage']:4.0%} of {engine.allocator.num_blocks} blocks, "
                     f"{engine.num_preemptions} preemptions, prefill tokens computed {prefill}")
            if engine.enable_prefix_caching:
                line += (f", prefix-cache hits {engine.prefix_hits}/{engine.prefix_queries} tokens "
                         f"({engine.prefix_hits / max(1, engine.prefix_queries):.0%})")
        print(line)
    same = all([r.output for r in res.requests] == base for _, res, _, _ in runs.values())
    alone = generate(model, [list(trace.requests[0].prompt)], 24).tokens[0]
    print(f"\nevery engine gave every request the same tokens: {same}; "
          f"request 0 equals stage 04's generate alone: {runs['paged + prefix cache'][1].requests[0].output == alone}")
    smollm2_paged(device, dtype)


def smollm2_paged(device: str | torch.device, dtype: torch.dtype, max_new_tokens: int = 48) -> None:
    """kv_cache.demo's QUESTIONS, greedy, on SmolLM2-135M-Instruct (where installed) through
    the PagedEngine (blocks of 16, prefix caching): the first request alone for one step, so
    its prompt's blocks are cached, then the others; their answers, the prefix-cache hits on
    the chat template's default system prompt, the tokens/s."""
    print()
    real = smollm2_for_demo(device, dtype)
    if real is None:
        return
    print(f"SmolLM2-135M-Instruct on paged memory (blocks of 16, prefix caching): {len(QUESTIONS)} chat "
          f"requests, greedy, up to {max_new_tokens} new tokens each, the others submitted a step after the first")
    model, tok, gguf = real
    prompts = [chat_ids(tok, gguf, q) for q in QUESTIONS]
    shared = next(i for i, col in enumerate(zip(*prompts)) if len(set(col)) > 1)
    eos = int(gguf.metadata["tokenizer.ggml.eos_token_id"])
    engine = PagedEngine(model, ContinuousBatching(len(prompts)), block_size=16,
                         max_len=max(map(len, prompts)) + max_new_tokens)
    t0 = time.perf_counter()
    requests = [engine.add_request(Request(prompts[0], max_new_tokens, stop=[eos]))]
    engine.step()
    requests += [engine.add_request(Request(p, max_new_tokens, stop=[eos])) for p in prompts[1:]]
    while engine.has_unfinished():
        engine.step()
    secs = time.perf_counter() - t0
    for question, r in zip(QUESTIONS, requests):
        print(f"> {question}\n{tok.decode(r.output)}  [{len(r.output)} tokens, {r.finish_reason}]")
    n = sum(len(r.output) for r in requests)
    hits = f"{engine.prefix_hits}/{engine.prefix_queries}"
    print(f"{n} tokens in {secs:.1f} s = {n / secs:.1f} tokens/s (1 torch thread). The prompts share their first "
          f"{shared} tokens (the template's default system turn, then <|im_start|>user); prefix-cache hits {hits} "
          f"prompt tokens ({engine.prefix_hits / max(1, engine.prefix_queries):.0%}): whole blocks of 16 only")
