# GENERATED from solutions/server/engine_loop.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""The engine loop (given code): the one thread that touches the engine, fed by commands.

`EngineLoop` runs one engine: between two steps it applies the commands (`Add`, `Abort`), aborts
requests past their deadlines (7.3), runs one `engine.step()`, turns tokens into text, and
retires finished sequences: a log record (7.6), `forget` (flat memory) and the job's `Closed`
once its last sequence is done (its admission ticket released, 7.2). It knows the server only
as an `EngineHost` (engine_client.py), handed each step's events in ONE call (`_flush`).
`EngineThread` is the `EngineClient` that runs it in a thread of this process;
`EngineProcess` (engine_process.py) runs the same in a process of its own."""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from solutions.batching import Request, SamplingParams
from solutions.paged import PagedEngine

from .deadlines import deadline_error, deadline_reason
from .detokenizer import BYTE_TEXT, Detokenizer, TokenText
from .engine_client import (
    CLOSED,
    Closed,
    Command,
    Deadlines,
    Delta,
    EngineHost,
    EngineInfo,
    Error,
    Event,
    Finish,
    Logprobs,
)
from .protocol import APIError, GenerationRequest

log = logging.getLogger("course.server")


def engine_stats(engine: PagedEngine, steps: int = 0) -> dict:
    """A snapshot of the engine between steps, read through its public attributes: what
    /health and /metrics report (`steps`: the engine steps run so far, counted by the
    caller)."""
    sched, alloc = engine.scheduler, engine.allocator
    return {"running": len(sched.running), "waiting": len(sched.waiting), "kv_usage": float(engine.kv_usage()),
            "free_blocks": int(alloc.num_free_blocks), "total_blocks": int(alloc.num_blocks),
            "tracked_requests": len(engine.requests), "preemptions": int(engine.num_preemptions),
            "prefix_queries": int(engine.prefix_queries), "prefix_hits": int(engine.prefix_hits),
            "steps": int(steps)}


def engine_info(engine: PagedEngine) -> EngineInfo:
    """What the server reads of `engine` before it starts."""
    return EngineInfo(block_size=engine.block_size, num_blocks=engine.allocator.num_blocks, max_len=engine.max_len,
                      vocab_size=engine.model.config.vocab_size, stats=engine_stats(engine))


@dataclass
class _Job:
    """The engine's view of one HTTP request: its n engine sequences per prompt."""

    id: str
    gen: GenerationRequest
    arrival: float
    seqs: dict[str, _Seq] = field(default_factory=dict)
    done: bool = False


@dataclass
class _Seq:
    job: _Job
    index: int
    request: Request
    detok: Detokenizer
    reason: str | None = None   # the server's finish reason when it ends a sequence itself
    echoed: bool = False        # its prompt's log-probabilities were sent (echo)


class EngineLoop:
    """One engine, its commands and its jobs; `run` until `stop`. Every method but
    `submit` and `stop` runs on the loop's own thread. `text`: the served model's token
    bytes and end-of-sequence id (the byte model's by default)."""

    def __init__(self, engine: PagedEngine, host: EngineHost, deadlines: Deadlines, text: TokenText = BYTE_TEXT):
        self.engine, self.host, self.deadlines, self.text = engine, host, deadlines, text
        self.commands: queue.SimpleQueue[Command | None] = queue.SimpleQueue()  # None: wake up
        self.jobs: dict[str, _Job] = {}
        self.seqs: dict[str, _Seq] = {}
        self.steps_run = 0  # engine steps that ran, counted here (the engine's step log is trimmed)
        self._outbox: list[tuple[str, Event | Closed]] = []  # this step's events, for `_flush`
        self._stop = threading.Event()

    def submit(self, command: Command) -> None:
        self.commands.put(command)

    def stop(self) -> None:
        self._stop.set()
        self.commands.put(None)

    def run(self) -> None:
        while not self._stop.is_set():
            self.run_once()

    def run_once(self) -> None:
        """Commands, deadlines, one step; then this step's events to the host, and stats."""
        tokens: list[int] = []  # what the step ran (vllm:iteration_tokens_total)
        try:
            self._apply_commands(block=not self.engine.has_unfinished())
            self._check_deadlines()
            if self.engine.has_unfinished():
                tokens = self._step()
        except Exception as e:  # a bug must not kill the server: fail what is in flight
            log.error("engine loop error", exc_info=e)
            self._fail_all(APIError(500, f"engine error: {type(e).__name__}: {e}", type="internal_error"))
        self._flush()
        self.host.update_stats({**engine_stats(self.engine, self.steps_run), "iteration_tokens": tokens})

    def _step(self) -> list[int]:
        out = self.engine.step()
        self.steps_run += bool(out.ran)
        self._emit(out)
        if not out.ran:
            time.sleep(0.001)
            return []
        if len(self.engine.steps) > 4096:  # keep the engine's step log bounded too
            del self.engine.steps[:-1024]
        return [self.engine.steps[-1].prefill_tokens + self.engine.steps[-1].decode_rows]  # the tokens it ran

    def _flush(self) -> None:
        """Hand this step's events to the host in ONE call, instead of one per token: each
        wake-up of the HTTP side's event loop costs the engine thread a write to the loop's
        self-pipe and the interpreter lock it then waits to get back
        (07_serving/bench_host.py measures the host work between steps)."""
        if self._outbox:
            batch, self._outbox = self._outbox, []
            self.host.deliver(batch)

    def _apply_commands(self, block: bool) -> None:
        try:
            command = self.commands.get(timeout=0.05) if block else self.commands.get_nowait()
        except queue.Empty:
            return
        while True:
            match command:  # by shape: 7.7's drain submits a plain ("abort", job_id, error)
                case ("add", job_id, gen, arrival):
                    self._add(_Job(job_id, gen, arrival))
                case ("abort", job_id, reason) if job_id in self.jobs:
                    self._fail(self.jobs[job_id], reason)
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                return

    def _add(self, job: _Job) -> None:
        """Queue a job's sequences, all in this one command (so they are scheduled together):
        for each prompt p of its batch, n sequences, choice indices p * n + j."""
        g = job.gen
        sampling = SamplingParams(temperature=g.temperature, top_p=g.top_p, seed=g.seed,
                                  repetition_penalty=g.repetition_penalty, min_tokens=g.min_tokens,
                                  ignore_eos=g.ignore_eos, logprobs=g.logprobs,
                                  prompt_logprobs=g.logprobs if g.echo else None)
        self.jobs[job.id] = job
        try:
            for p, prompt in enumerate(g.batch):
                rid = job.id if len(g.batch) == 1 else f"{job.id}-p{p}"
                base = Request(list(prompt), g.max_tokens, sampling=sampling, stop=[self.text.eos_id],
                               request_id=rid, client=g.client, priority=g.priority)
                base.arrival = job.arrival
                forks = self.engine.add_forked(base, g.n) if g.n > 1 else [self.engine.add_request(base)]
                for j, r in enumerate(forks):
                    seq = _Seq(job, p * g.n + j, r, Detokenizer(g.stop, self.text))
                    job.seqs[r.request_id] = seq
                    self.seqs[r.request_id] = seq
        except ValueError as e:
            self._fail(job, APIError(400, str(e)))

    def _check_deadlines(self) -> None:
        """Abort each job past a deadline: its own (the body's or the server's), else the loop's."""
        now = self.engine.clock()
        for job in list(self.jobs.values()):
            first_s = job.gen.first_token_timeout or self.deadlines.first_token_s  # never 0: gt=0
            total_s = job.gen.timeout or self.deadlines.total_s
            if first_s is None and total_s is None:
                continue
            for seq in job.seqs.values():
                why = deadline_reason(seq.request, now, first_token_s=first_s, total_s=total_s)
                if why is not None:
                    self._fail(job, deadline_error(why, first_s if why == "first_token" else total_s))
                    break

    def _emit(self, out) -> None:
        for request, token in out.tokens:
            seq = self.seqs.get(request.request_id)
            if seq is None:
                continue
            if self._logprobs(seq, request):  # echo with max_tokens 0: the token made is no answer
                continue
            text, stopped = seq.detok.push(token, hold_stops=len(request.output) <= request.sampling.min_tokens)
            if text:
                self._outbox.append((seq.job.id, Delta("delta", seq.index, text)))
            if stopped and not request.finished:
                seq.reason = "stop"
                self.engine.abort(request.request_id)
                self._finish(seq)
        for request in out.finished:
            seq = self.seqs.get(request.request_id)
            if seq is not None:
                self._finish(seq)

    def _logprobs(self, seq: _Seq, request: Request, token: bool = True) -> bool:
        """A token's log-probabilities (and, with echo, first the prompt's, once) for a request
        that asked (`token` False: only the prompt's); True when the token is to be dropped
        (`echo_only`)."""
        g = seq.job.gen
        if request.prompt_logprobs is not None and not seq.echoed:
            seq.echoed = True
            self._outbox.append((seq.job.id, Logprobs("logprobs", seq.index, tuple(request.prompt_logprobs), True)))
        if g.echo_only or not token:
            return g.echo_only
        if request.logprobs:
            self._outbox.append((seq.job.id, Logprobs("logprobs", seq.index, (request.logprobs[-1],))))
        return False

    def _finish(self, seq: _Seq) -> None:
        """Retire a finished sequence: last text, finish event, log record, `forget`."""
        if self.seqs.pop(seq.request.request_id, None) is None:
            return
        job, r = seq.job, seq.request
        reason = seq.reason or r.finish_reason
        if reason in ("stop", "length"):
            self._logprobs(seq, r, token=False)  # an echo whose only token was the end of sequence
            reason = "length" if job.gen.echo_only else reason
            rest = seq.detok.flush()
            if rest:
                self._outbox.append((job.id, Delta("delta", seq.index, rest)))
            made = 0 if job.gen.echo_only else len(r.output)
            self._outbox.append((job.id, Finish("finish", seq.index, reason, len(r.prompt), made)))
        self.host.record(r, reason)
        self.engine.forget(r.request_id)  # engine.requests would otherwise grow for ever
        if not any(s.request.request_id in self.seqs for s in job.seqs.values()):
            self._close(job)

    def _close(self, job: _Job) -> None:
        self.jobs.pop(job.id, None)
        if not job.done:
            job.done = True
            self._outbox.append((job.id, CLOSED))  # after the job's last events

    def _fail(self, job: _Job, error: APIError | str) -> None:
        """Abort every unfinished sequence of a job; tell its client why (unless the client
        is gone: a reason that is no APIError)."""
        if isinstance(error, APIError):
            self._outbox.append((job.id, Error("error", error)))
        for seq in job.seqs.values():
            if seq.request.request_id in self.seqs:
                if not seq.request.finished:
                    self.engine.abort(seq.request.request_id)
                seq.reason = "abort"
                self._finish(seq)
        self._close(job)

    def _fail_all(self, error: APIError) -> None:
        for job in list(self.jobs.values()):
            try:
                self._fail(job, error)
            except Exception as e2:
                log.error("could not fail job %s", job.id, exc_info=e2)
                self._outbox.append((job.id, Error("error", APIError(500, "engine error", type="internal_error"))))
                self._close(job)


class EngineThread:
    """The engine in a thread of this process, an `EngineClient`: what the tests, the
    notebook and `course serve --in-process` run (`engine`: stage 06's PagedEngine)."""

    def __init__(self, engine: PagedEngine):
        self.engine, self.clock, self.info = engine, engine.clock, engine_info(engine)
        self._loop: EngineLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: EngineHost, deadlines: Deadlines, text: TokenText = BYTE_TEXT) -> None:
        self._loop = EngineLoop(self.engine, host, deadlines, text)
        self._thread = threading.Thread(target=self._loop.run, name="course-engine", daemon=True)
        self._thread.start()

    def submit(self, command: Command) -> None:
        if self._loop is None:
            raise RuntimeError("the engine thread has not been started")
        self._loop.submit(command)

    def stop(self, timeout: float = 5.0) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.stop()
            self._thread.join(timeout)
