"""What a running server shares (given code): its settings, and the state of one server."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass

from solutions.batching import Engine, Request
from solutions.tokenizer import ByteTokenizer

from .admission import AdmissionControl
from .engine_loop import EngineLoop, Job
from .engine_process import EngineProcess
from .metrics import Metrics, request_log
from .protocol import MODEL_NAME, Limits
from .shutdown import drain

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


class ServerState:
    """Everything a running server shares: config, engine loop, admission, metrics, and the
    jobs in flight (`jobs`, the event loop's view: added by a handler, removed when its
    answer has been given)."""

    def __init__(self, engine: Engine | EngineProcess, tokenizer: ByteTokenizer, config: ServerConfig):
        self.config, self.tokenizer = config, tokenizer
        self.block_size = int(getattr(engine, "block_size", 16))
        if getattr(engine, "allocator", None) is not None:
            num_blocks = int(engine.allocator.num_blocks)
        else:
            num_blocks = engine.scheduler.max_cache_tokens // self.block_size
        queue_tokens = config.max_queue_tokens
        if queue_tokens is None:
            queue_tokens = num_blocks * self.block_size
        if not config.admission:
            queue_tokens = 1 << 40
        self.admission = AdmissionControl(num_blocks=num_blocks, block_size=self.block_size,
                                          max_queue_tokens=queue_tokens, retry_after_s=config.retry_after_s,
                                          max_wait_s=config.max_queue_wait_s, clock=engine.clock)
        self.limits = Limits(context=engine.max_len, vocab_size=engine.model.config.vocab_size, max_n=config.max_n,
                             models=(config.model_name,))
        self.metrics = Metrics(config.model_name)
        # an engine in this process gets the engine thread; one in its own process, its pipe
        self.loop = engine.loop_for(self) if isinstance(engine, EngineProcess) else EngineLoop(engine, tokenizer, self)
        self.engine = engine
        self.jobs: dict[str, Job] = {}
        self.finished_lines: list[dict] = []   # the last few log lines (for tests and the demo)
        self._log_file = open(config.request_log, "a", encoding="utf-8") if config.request_log else None
        self._log_lock = threading.Lock()

    def record(self, request: Request, reason: str | None) -> None:
        """Engine thread: one finished sequence -> log line (logger + JSONL file) + metrics."""
        line = request_log(request, reason)
        text = json.dumps(line)
        log.info(text)
        with self._log_lock:
            if self._log_file is not None:
                self._log_file.write(text + "\n")
                self._log_file.flush()
            self.finished_lines.append(line)
            del self.finished_lines[:-1000]
        self.metrics.observe_finished(line, request)

    def close(self) -> None:
        self.loop.stop()
        with self._log_lock:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    def abort(self, job: Job, reason: str) -> None:
        """Ask the engine thread to abort a job (applied before its next step)."""
        self.loop.submit(("abort", job.id, reason))

    async def drain(self, grace_s: float, poll_s: float = 0.02) -> int:
        """Graceful shutdown (`shutdown.drain`); return how many jobs were aborted."""
        return await drain(self, grace_s, poll_s)
