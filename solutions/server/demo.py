"""The stage's demo (given code): `course demo 07`."""

from __future__ import annotations

import sys
import time

import torch

from solutions.gpt import on_one_thread
from solutions.tokenizer import ByteTokenizer

from .engine import make_engine
from .protocol import MODEL_NAME
from .serve import serve_in_thread
from .state import ServerConfig


@on_one_thread
def demo(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> None:
    """Start the server on an ephemeral loopback port, send concurrent streaming requests with
    the unmodified `openai` client, print the answers and a metrics excerpt, stop. The model,
    on `device` in `dtype`: SmolLM2-135M-Instruct where its wheel is installed (greedy chat
    requests, kv_cache.demo's QUESTIONS), else the course's default model (sampled, seeded
    completions: temperature 0.8, top_p 0.95)."""
    from solutions.kv_cache.demo import smollm2_for_demo

    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # as the CLI does: the engine thread and the event loop share the GIL
    try:
        real = smollm2_for_demo(device, dtype)
        if real is not None:
            _serve_smollm2(*real)
        else:
            _serve_default(device, dtype)
    finally:
        sys.setswitchinterval(switch)


def _serve_smollm2(model, bpe, gguf) -> None:
    """SmolLM2 served as `course serve --model smollm2 --in-process --num-blocks 64` serves it:
    its chat template, its tokenizer, <|im_end|> ending each answer; concurrent streamed chats."""
    from concurrent.futures import ThreadPoolExecutor

    import openai

    from solutions.kv_cache.demo import QUESTIONS

    from .served_model import SMOLLM2, bpe_tokenizer

    handle = serve_in_thread(make_engine(model, max_batch_size=8, num_blocks=64), bpe_tokenizer(bpe, gguf),
                             ServerConfig(model_name=SMOLLM2))
    try:
        print(f"serving SmolLM2-135M-Instruct as {SMOLLM2!r} at {handle.url}/v1 (OpenAI-compatible; 1 torch thread)")
        client = openai.OpenAI(base_url=f"{handle.url}/v1", api_key="demo", max_retries=0, timeout=120)
        print(f"{len(QUESTIONS)} concurrent streamed chat requests from the openai client, greedy, max_tokens 48:")
        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(QUESTIONS)) as pool:
            answers = list(pool.map(lambda q: _chat(client, q), QUESTIONS))
        wall = time.perf_counter() - t0
        for question, (text, ttft, n, finish) in zip(QUESTIONS, answers):
            print(f"> {question}\n{text}  [{n} tokens, {finish}; first after {ttft * 1e3:.0f} ms]")
        total = sum(a[2] for a in answers)
        print(f"\n{len(QUESTIONS)} concurrent streams in {wall:.2f} s, {total} tokens = {total / wall:.1f} tokens/s. "
              "/metrics excerpt:")
        _print_metrics(handle.url)
    finally:
        handle.stop()
    print("server stopped")


def _chat(client, question: str) -> tuple[str, float, int, str]:
    """One streamed greedy chat turn: its text, seconds to its first text, its token count
    (the usage chunk) and finish reason."""
    from .served_model import SMOLLM2

    t0 = time.perf_counter()
    ttft, text, usage, finish = None, "", 0, ""
    stream = client.chat.completions.create(model=SMOLLM2, messages=[{"role": "user", "content": question}],
                                            max_tokens=48, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            ttft = ttft or time.perf_counter() - t0
            text += chunk.choices[0].delta.content
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
    return text, ttft or float("nan"), usage, finish


def _serve_default(device, dtype) -> None:
    """The course's default model: concurrent sampled completions and a chat."""
    from concurrent.futures import ThreadPoolExecutor

    import openai

    from solutions.batching import default_model

    model, what = default_model(device, dtype)
    handle = serve_in_thread(make_engine(model, max_batch_size=8), ByteTokenizer(), ServerConfig())
    try:
        print(f"serving {what} at {handle.url}/v1 (OpenAI-compatible; 1 torch thread)")
        client = openai.OpenAI(base_url=f"{handle.url}/v1", api_key="demo", max_retries=0, timeout=30)
        prompts = ["def fibonacci(n):\n    ", "import os\n", "class Stack:\n    def push(self, item):\n        ",
                   "for i in range(10):\n    ", "# Return the sum of a list\n", "with open(path) as f:\n    "]

        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(prompts)) as pool:
            answers = list(pool.map(lambda p: _ask(client, p, prompts.index(p)), prompts))
        wall = time.perf_counter() - t0
        for prompt, (text, ttft, n) in zip(prompts, answers):
            print(f"--- {prompt!r} -> {n} tokens, first after {ttft * 1e3:.0f} ms\n{prompt}{text}")
        chat = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hello"}],
                                              max_tokens=24, temperature=0.8, seed=0)
        print(f"--- chat: {chat.choices[0].message.content!r} ({chat.choices[0].finish_reason})")
        print(f"\n{len(prompts)} concurrent streams in {wall:.2f} s. /metrics excerpt:")
        _print_metrics(handle.url)
    finally:
        handle.stop()
    print("server stopped")


def _ask(client, prompt: str, seed: int) -> tuple[str, float, int]:
    """One streamed completion: its text, seconds to its first token, its token count."""
    t0 = time.perf_counter()
    ttft, text = None, ""
    stream = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=48, temperature=0.8,
                                       top_p=0.95, seed=seed, stream=True, stream_options={"include_usage": True})
    usage = None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            ttft = ttft or time.perf_counter() - t0
            text += chunk.choices[0].text
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
    return text, ttft or float("nan"), usage


def _print_metrics(url: str) -> None:
    """A few of the server's /metrics lines."""
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=10).text
    keep = ("vllm:num_requests_running{", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
            "vllm:request_success_total", "vllm:time_to_first_token_seconds_count",
            "vllm:time_to_first_token_seconds_sum", "vllm:kv_cache_usage_perc")
    for line in text.splitlines():
        if line.startswith(keep):
            print("  " + line)
