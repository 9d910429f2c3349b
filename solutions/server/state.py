"""What a running server shares (given code): its settings, its jobs, and the state of one
server, which is also the host its engine reports to (`EngineHost`, engine_client.py)."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field

from solutions.batching import Request
from solutions.paged import PagedEngine
from solutions.tokenizer import ByteTokenizer

from .admission import AdmissionControl, Ticket
from .engine_client import Abort, Add, Closed, Deadlines, EngineClient, Event
from .engine_loop import EngineThread
from .engine_process import EngineProcess
from .log_writer import RequestLogWriter
from .metrics import Metrics, request_log
from .protocol import MODEL_NAME, APIError, GenerationRequest, Limits
from .served_model import ServedTokenizer, as_served
from .streaming import TokenStream
from .tracing import RequestTracer

log = logging.getLogger("course.server")


@dataclass
class ServerConfig:
    """Server settings. Admission's queue beyond the KV memory: what the server is measured
    to start within `max_queue_wait_s` seconds ("queue length = throughput x acceptable
    wait"; None: no such rule), and at least `max_queue_tokens` tokens of reservations
    (None = as many as the memory holds), what a server with no measurement yet queues.
    Deadlines in seconds from arrival (None: none). `max_body_bytes`: larger bodies get 413."""

    model_name: str = MODEL_NAME
    api_key: str | None = None
    max_n: int = 8
    max_body_bytes: int = 1 << 20
    max_queue_tokens: int | None = None
    max_queue_wait_s: float | None = 10.0
    retry_after_s: int = 1
    first_token_timeout_s: float | None = None
    timeout_s: float | None = None
    shutdown_grace_s: float = 10.0
    request_log: str | None = None
    admission: bool = True
    allowed_origins: tuple[str, ...] = ()  # CORS: the web origins whose pages may call the API (none: no CORS)
    degrade_watermark: float | None = None  # degradation before refusal (AdmissionControl.granted_max_tokens)
    degraded_max_tokens: int = 32
    tracer_provider: object | None = None  # OpenTelemetry: a span per finished request (tracing.py; None: none)


@dataclass
class Job:
    """One HTTP request inside the server: its validated request, its event stream and its
    admission ticket (the engine keeps its own view of it, `engine_loop._Job`)."""

    id: str
    gen: GenerationRequest
    stream: TokenStream
    ticket: Ticket
    arrival: float
    created: int = field(default_factory=lambda: int(time.time()))


def _run_calls(calls: list) -> None:
    """On the event loop's thread: each (fn, args) of a step, in order."""
    for fn, args in calls:
        fn(*args)


class ServerState:
    """Everything a running server shares: config, the engine (`loop`, an `EngineClient`:
    the name 7.7's drain knows it by), admission, metrics, and the jobs in flight (`jobs`,
    the event loop's view: added by a handler, removed when its answer has been given).
    `engine`: stage 06's PagedEngine, run in a thread of this process, or an
    `EngineProcess`. `tokenizer`: the served model's (`served_model.ServedTokenizer`; None or
    a ByteTokenizer: the byte model's), whose `text` the engine streams with."""

    def __init__(self, engine: PagedEngine | EngineProcess, tokenizer: ServedTokenizer | ByteTokenizer | None,
                 config: ServerConfig):
        self.config, self.tokenizer, self.engine = config, as_served(tokenizer), engine
        self.loop: EngineClient = EngineThread(engine) if isinstance(engine, PagedEngine) else engine
        info = self.loop.info
        self.admission = _admission(config, info.num_blocks, info.block_size, self.loop.clock)
        self.limits = Limits(context=info.max_len, vocab_size=info.vocab_size, max_n=config.max_n,
                             models=(config.model_name,), first_token_timeout=config.first_token_timeout_s,
                             timeout=config.timeout_s)
        self.metrics = Metrics(config.model_name)
        self.stats = dict(info.stats)  # the engine's last snapshot (/health)
        self.jobs: dict[str, Job] = {}
        self.in_engine: dict[str, Job] = {}  # added to the engine and not closed by it yet
        self.finished_lines: list[dict] = []   # the last few log lines (for tests and the demo)
        self.request_log = RequestLogWriter(log, config.request_log)  # the console's and the file's lines, queued
        self.tracer = RequestTracer(config.tracer_provider) if config.tracer_provider is not None else None
        self._log_lock = threading.Lock()

    # -- the HTTP side's verbs (the event loop's thread)
    def start(self) -> None:
        self.loop.start(self, Deadlines(self.config.first_token_timeout_s, self.config.timeout_s),
                        self.tokenizer.text)

    def add(self, job: Job) -> None:
        """Hand a job to the engine; its events arrive on `job.stream`."""
        self.jobs[job.id] = job
        self.in_engine[job.id] = job
        self.metrics.observe_params(job.gen.n, job.gen.max_tokens)
        self.loop.submit(Add("add", job.id, job.gen, job.arrival))

    def abort(self, job: Job, reason: APIError | str) -> None:
        """Ask the engine to abort a job (applied before its next step)."""
        self.loop.submit(Abort("abort", job.id, reason))

    def close(self) -> None:
        self.loop.stop()
        self.request_log.close()  # what is queued is written first
        if self.tracer is not None:
            self.tracer.close()

    # -- EngineHost: the engine's calls (its thread, or an engine process's reader)
    def deliver(self, batch: list[tuple[str, Event | Closed]]) -> None:
        """One step's events, each to its job's stream, in ONE `call_soon_threadsafe` per
        event loop (7.5's `TokenStream.put` is that call for a single event); on the loop's
        thread they run in the order they came; a closed loop (the server is gone) drops
        them. A job's `Closed` releases its ticket at once, counted as served (the service
        rate admission's queue is sized by), and forgets the job on the loop after its last
        events (a handler normally forgets its job itself; this covers one whose client
        left before its response even started)."""
        by_loop: dict = {}
        for job_id, event in batch:
            job = self.in_engine.get(job_id)
            if job is None:
                continue
            calls = by_loop.setdefault(job.stream.loop, [])
            if isinstance(event, Closed):
                del self.in_engine[job_id]
                self.admission.served(job.ticket)
                calls.append((self.jobs.pop, (job_id, None)))
            else:
                calls.append((job.stream.queue.put_nowait, (event,)))
        for loop, calls in by_loop.items():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_run_calls, calls)

    def record(self, request: Request, reason: str | None) -> None:
        """One finished sequence -> log line (logger + JSONL file, queued) + metrics."""
        line = request_log(request, reason)
        self.request_log.write(json.dumps(line))  # never waits on a disk or a terminal (log_writer.py)
        with self._log_lock:
            self.finished_lines.append(line)
            del self.finished_lines[:-1000]
        self.metrics.observe_finished(line, request)
        self.metrics.observe_sizes(line)
        if self.tracer is not None:
            self.tracer.record(line, request.client)

    def update_stats(self, stats: dict) -> None:
        self.metrics.update_engine(stats)
        self.stats = {k: v for k, v in stats.items() if k != "iteration_tokens"}  # a snapshot: /health


def _admission(config: ServerConfig, num_blocks: int, block_size: int, clock) -> AdmissionControl:
    """Admission by KV blocks over the engine's memory, its queue as `config` says."""
    queue_tokens = config.max_queue_tokens
    if queue_tokens is None:
        queue_tokens = num_blocks * block_size
    if not config.admission:
        queue_tokens = 1 << 40
    return AdmissionControl(num_blocks=num_blocks, block_size=block_size, max_queue_tokens=queue_tokens,
                            retry_after_s=config.retry_after_s, max_wait_s=config.max_queue_wait_s, clock=clock,
                            degrade_watermark=config.degrade_watermark, degraded_max_tokens=config.degraded_max_tokens)
