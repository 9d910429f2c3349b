# GENERATED from solutions/server/engine_loop.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""The engine thread (given code): the one thread that touches the engine, fed by commands."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from solutions.batching import Engine, Request, SamplingParams
from solutions.tokenizer import EOT, ByteTokenizer

from .admission import Ticket
from .deadlines import deadline_error, deadline_reason
from .detokenizer import Detokenizer
from .protocol import APIError, GenerationRequest
from .streaming import TokenStream

if TYPE_CHECKING:
    from .state import ServerState

log = logging.getLogger("course.server")


def engine_stats(engine: Engine, steps: int = 0) -> dict:
    """A snapshot of the engine between steps, read through its public attributes: what
    /health and /metrics report (`steps`: the engine steps run so far, counted by the
    caller). Works for stage 06's PagedEngine (blocks) and stage 05's Engine (cache rows)."""
    sched = engine.scheduler
    alloc = getattr(engine, "allocator", None)
    if alloc is not None:
        free, total = alloc.num_free_blocks, alloc.num_blocks
    else:  # stage 05's contiguous cache: count free rows as "blocks"
        free, total = len(engine.free_slots), sched.max_batch_size
    usage = engine.kv_usage() if hasattr(engine, "kv_usage") else sched.tokens_held() / sched.max_cache_tokens
    return {"running": len(sched.running), "waiting": len(sched.waiting), "kv_usage": float(usage),
            "free_blocks": int(free), "total_blocks": int(total), "tracked_requests": len(engine.requests),
            "preemptions": int(getattr(engine, "num_preemptions", sum(r.preemptions for r in engine.requests.values()))),
            "prefix_queries": int(getattr(engine, "prefix_queries", 0)),
            "prefix_hits": int(getattr(engine, "prefix_hits", 0)), "steps": int(steps)}


def _run_calls(calls: list) -> None:
    """On the event loop's thread: each (fn, args) of a step, in order."""
    for fn, args in calls:
        fn(*args)


def forget(engine: Engine, request_id: str) -> None:
    """Drop a FINISHED request from the engine's bookkeeping (`engine.requests` would
    otherwise grow for ever: memory must stay flat over a long run)."""
    engine.forget(request_id)


@dataclass
class Job:
    """One HTTP request inside the server: its validated request, its n engine sequences,
    its event stream and its admission ticket."""

    id: str
    gen: GenerationRequest
    stream: TokenStream
    ticket: Ticket
    arrival: float
    created: int = field(default_factory=lambda: int(time.time()))
    seqs: dict[str, _Seq] = field(default_factory=dict)   # engine thread only
    done: bool = False                                     # engine thread only


@dataclass
class _Seq:
    job: Job
    index: int
    request: Request
    detok: Detokenizer
    reason: str | None = None   # the server's finish reason when it ends a sequence itself


class EngineLoop:
    """The one thread that touches the engine (given code).

    HTTP handlers hand it commands through a thread-safe queue: ("add", job) and
    ("abort", job_id, reason). Between steps it applies them, aborts requests past their
    deadlines (7.3), runs one `engine.step()`, turns tokens into text for each job's
    TokenStream (7.5: the step's events reach the event loop in one call, `_flush`), and
    retires finished sequences: log line and metrics
    (7.6), `forget` (flat memory), the admission ticket released (7.2) and counted as
    served (the service rate the admission queue is sized by).
    """

    def __init__(self, engine: Engine, tokenizer: ByteTokenizer, state: ServerState):
        self.engine, self.tokenizer, self.state = engine, tokenizer, state
        self.commands: queue.SimpleQueue = queue.SimpleQueue()
        self.jobs: dict[str, Job] = {}
        self.seqs: dict[str, _Seq] = {}
        self.steps_run = 0  # engine steps that ran, counted here (the engine's step log is trimmed)
        self.stats = engine_stats(engine, self.steps_run)
        self._outbox: list[tuple] = []  # (loop, fn, args) of this step, for `_flush`
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="course-engine", daemon=True)

    def _send(self, job: Job, event: tuple) -> None:
        """An event for a job's stream, handed over by `_flush` at the end of this step."""
        self._outbox.append((job.stream.loop, job.stream.queue.put_nowait, (event,)))

    def _flush(self) -> None:
        """Hand this step's events (and callbacks) to the event loop in ONE
        `call_soon_threadsafe` per loop, instead of one per token (7.5's `TokenStream.put`
        is that call for a single event): each wake-up of the loop costs the engine thread
        a write to the loop's self-pipe and the interpreter lock it then waits to get back
        (07_serving/bench_host.py measures the host work between steps). On the loop's
        thread they run in the order they were queued; a closed loop (the server is gone)
        drops them."""
        if not self._outbox:
            return
        by_loop: dict = {}
        for loop, fn, args in self._outbox:
            by_loop.setdefault(loop, []).append((fn, args))
        self._outbox = []
        for loop, calls in by_loop.items():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_run_calls, calls)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.commands.put(("wake",))
        self._thread.join(timeout)

    def submit(self, command: tuple) -> None:
        self.commands.put(command)

    # -- the loop
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._apply_commands(block=not self.engine.has_unfinished())
                self._check_deadlines()
                if self.engine.has_unfinished():
                    out = self.engine.step()
                    self.steps_run += bool(out.ran)
                    self._emit(out)
                    if not out.ran:
                        time.sleep(0.001)
                    if len(self.engine.steps) > 4096:  # keep the engine's step log bounded too
                        del self.engine.steps[:-1024]
            except Exception as e:  # a bug must not kill the server: fail what is in flight
                log.error("engine loop error", exc_info=e)
                for job in list(self.jobs.values()):
                    try:
                        self._fail(job, APIError(500, f"engine error: {type(e).__name__}: {e}",
                                                 type="internal_error"))
                    except Exception as e2:
                        log.error("could not fail job %s", job.id, exc_info=e2)
                        self.jobs.pop(job.id, None)
                        job.stream.put(("error", APIError(500, "engine error", type="internal_error")))
            self._flush()
            self.stats = engine_stats(self.engine, self.steps_run)
            self.state.metrics.update_engine(self.stats)

    def _apply_commands(self, block: bool) -> None:
        try:
            command = self.commands.get(timeout=0.05) if block else self.commands.get_nowait()
        except queue.Empty:
            return
        while True:
            if command[0] == "add":
                self._add(command[1])
            elif command[0] == "abort":
                job = self.jobs.get(command[1])
                if job is not None:
                    self._fail(job, command[2])
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                return

    def _add(self, job: Job) -> None:
        """Queue a job's sequences, all in this one command (so they are scheduled together):
        for each prompt p of its batch, n sequences, choice indices p * n + j."""
        g = job.gen
        sampling = SamplingParams(temperature=g.temperature, top_p=g.top_p, seed=g.seed,
                                  repetition_penalty=g.repetition_penalty, min_tokens=g.min_tokens,
                                  ignore_eos=g.ignore_eos)
        self.jobs[job.id] = job
        try:
            for p, prompt in enumerate(g.batch):
                rid = job.id if len(g.batch) == 1 else f"{job.id}-p{p}"
                for j, r in enumerate(self._queue(job, rid, list(prompt), sampling)):
                    seq = _Seq(job, p * g.n + j, r, Detokenizer(g.stop))
                    job.seqs[r.request_id] = seq
                    self.seqs[r.request_id] = seq
        except ValueError as e:
            self._fail(job, APIError(400, str(e)))

    def _queue(self, job: Job, rid: str, prompt: list[int], sampling: SamplingParams) -> list[Request]:
        """The engine requests of one prompt: n sequences (forked where the engine can)."""
        g = job.gen
        base = Request(prompt, g.max_tokens, sampling=sampling, stop=[EOT], request_id=rid)
        if g.n > 1 and hasattr(self.engine, "add_forked"):
            base.arrival = job.arrival
            return self.engine.add_forked(base, g.n)
        if g.n > 1:  # stage 05's engine cannot share a prompt: n independent copies
            requests = []
            for i in range(g.n):
                s = dataclasses.replace(sampling, seed=None if g.seed is None else g.seed + i)
                r = Request(prompt, g.max_tokens, sampling=s, stop=[EOT], request_id=f"{rid}-{i}")
                requests.append(self.engine.add_request(r, arrival=job.arrival))
            return requests
        return [self.engine.add_request(base, arrival=job.arrival)]

    def _check_deadlines(self) -> None:
        cfg, now = self.state.config, self.engine.clock()
        if cfg.first_token_timeout_s is None and cfg.timeout_s is None:
            return
        for job in list(self.jobs.values()):
            for seq in job.seqs.values():
                why = deadline_reason(seq.request, now, first_token_s=cfg.first_token_timeout_s,
                                      total_s=cfg.timeout_s)
                if why is not None:
                    limit = cfg.first_token_timeout_s if why == "first_token" else cfg.timeout_s
                    self._fail(job, deadline_error(why, limit))
                    break

    def _emit(self, out) -> None:
        for request, token in out.tokens:
            seq = self.seqs.get(request.request_id)
            if seq is None:
                continue
            text, stopped = seq.detok.push(token, hold_stops=len(request.output) <= request.sampling.min_tokens)
            if text:
                self._send(seq.job, ("delta", seq.index, text))
            if stopped and not request.finished:
                seq.reason = "stop"
                self.engine.abort(request.request_id)
                self._finish(seq)
        for request in out.finished:
            seq = self.seqs.get(request.request_id)
            if seq is not None:
                self._finish(seq)

    def _finish(self, seq: _Seq) -> None:
        """Retire a finished sequence: last text, finish event, log line, metrics."""
        if self.seqs.pop(seq.request.request_id, None) is None:
            return
        job, r = seq.job, seq.request
        reason = seq.reason or r.finish_reason
        if reason in ("stop", "length"):
            rest = seq.detok.flush()
            if rest:
                self._send(job, ("delta", seq.index, rest))
            self._send(job, ("finish", seq.index, reason, len(r.prompt), len(r.output)))
        self.state.record(r, reason)
        forget(self.engine, r.request_id)
        if not any(s.request.request_id in self.seqs for s in job.seqs.values()):
            self._close(job)

    def _close(self, job: Job) -> None:
        self.jobs.pop(job.id, None)
        if not job.done:
            job.done = True
            self.state.admission.served(job.ticket)   # released, and counted in the service rate
            # a handler normally forgets its job itself; this covers one whose client left
            # before its response even started (after the job's last events)
            self._outbox.append((job.stream.loop, self.state.jobs.pop, (job.id, None)))

    def _fail(self, job: Job, error: APIError | str) -> None:
        """Abort every unfinished sequence of a job; tell its client why (unless the client
        is gone: reason "disconnect")."""
        for seq in job.seqs.values():
            if seq.request.request_id in self.seqs:
                if not seq.request.finished:
                    self.engine.abort(seq.request.request_id)
                seq.reason = "abort"
                self._finish(seq)
        if isinstance(error, APIError):
            self._send(job, ("error", error))
        self._close(job)
