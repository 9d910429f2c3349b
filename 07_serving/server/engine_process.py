# GENERATED from solutions/server/engine_process.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""The engine in a process of its own (given code): what `course serve` runs by default.

In one process the engine thread and the HTTP event loop share one interpreter lock: every
SSE frame the loop writes is time the model's step waits for (the stage 07 lesson measures
it). vLLM puts its engine core in a separate process from its API server; so does this:

    HTTP process                                   engine process
    ------------                                   --------------
    event loop: parse, admit (7.2), stream   --->  ("add", id, request, arrival) / ("abort", id, why)
    _RemoteLoop's reader thread              <---  ("events", [(id, event), ...]) once a step,
      -> each job's TokenStream queue               ("record", request, reason), ("stats", {...})
                                                   EngineLoop: deadlines, step, detokenise, retire

The engine process runs the same `EngineLoop` as the in-process server (`_ChildLoop` only
changes where a step's events go: down a pipe instead of to an asyncio loop); the HTTP
process keeps admission, metrics, the request log and the jobs, and `ServerState` takes an
`EngineProcess` where it would take an engine (`loop_for`). The model is handed to the new
process once, at start (spawned, so no thread of this process is copied into it).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING

import torch
import torch.multiprocessing as mp

from solutions.gpt import GPT
from solutions.tokenizer import ByteTokenizer

from .engine_loop import EngineLoop, Job, _run_calls
from .protocol import APIError

if TYPE_CHECKING:
    from .state import ServerConfig, ServerState

log = logging.getLogger("course.server")
_CLOSED = "closed"  # the engine is done with a job: its ticket is released, the handler may forget it
_BOOT = """
import importlib
if PACKAGE.startswith("course_student."):
    import course
    course.load(PACKAGE.split(".", 1)[1], impl="student")
importlib.import_module(PACKAGE + ".engine_process")._child_main(*ARGS)
"""


class EngineProcess:
    """The engine, started in a process of its own; what `ServerState` reads of an engine
    (`block_size`, `allocator.num_blocks`, `max_len`, `model.config`, `clock`) comes from it
    once it is up. RuntimeError if the process fails to start within `start_timeout` s."""

    def __init__(self, model: GPT, *, threads: int = 1, start_timeout: float = 120.0, **engine_kwargs):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        # the new process imports this package under the same name first (so that the objects
        # sent to it unpickle: a learner's package is `course_student.server`, which only the
        # course's loader can import), then runs `_child_main`
        package = __name__.rpartition(".")[0]
        self.proc = ctx.Process(target=exec, args=(_BOOT, {"PACKAGE": package,
                                                           "ARGS": (child, model, engine_kwargs, threads)}),
                                name="course-engine", daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(start_timeout):
            self.proc.kill()
            raise RuntimeError(f"the engine process did not start within {start_timeout} s")
        kind, facts = self.conn.recv()
        if kind != "ready":
            self.proc.join(5)
            raise RuntimeError(f"the engine process failed to start: {facts}")
        self.block_size, self.max_len, self.stats = facts["block_size"], facts["max_len"], facts["stats"]
        self.allocator = SimpleNamespace(num_blocks=facts["num_blocks"])
        self.model = SimpleNamespace(config=model.config)
        self.clock = time.monotonic  # CLOCK_MONOTONIC: the same in both processes

    def loop_for(self, state: ServerState) -> _RemoteLoop:
        """The engine-loop stand-in `state` talks to (`submit`, `start`, `stop`, `stats`)."""
        return _RemoteLoop(self, state)


class _RemoteLoop:
    """The HTTP process's side of the pipe, with `EngineLoop`'s interface for the server."""

    def __init__(self, engine: EngineProcess, state: ServerState):
        self.engine, self.state, self.conn = engine, state, engine.conn
        self.stats = dict(engine.stats)
        self.jobs: dict[str, Job] = {}
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="course-engine-reader", daemon=True)

    def start(self) -> None:
        self._send(("config", self.state.config))
        self._reader.start()

    def stop(self, timeout: float = 5.0) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._send(("stop",))
        self.engine.proc.join(timeout)
        if self.engine.proc.is_alive():
            self.engine.proc.kill()
            self.engine.proc.join(5)
        self._reader.join(timeout)

    def submit(self, command: tuple) -> None:
        if command[0] == "add":
            job = command[1]
            self.jobs[job.id] = job
            self._send(("add", job.id, job.gen, job.arrival))
        elif command[0] == "abort":
            self._send(("abort", command[1], command[2]))

    def _send(self, message: tuple) -> None:
        with self._send_lock:  # handlers and the drain send from the event loop, stop() from elsewhere
            self.conn.send(message)

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            try:
                self._handle(message)
            except Exception as e:  # never let a bad message kill the reader
                log.error("engine process message %r failed", message[0], exc_info=e)
        self._fail_all(APIError(500, "the engine process exited", type="internal_error"))

    def _handle(self, message: tuple) -> None:
        kind = message[0]
        if kind == "events":
            calls, loop, closed = [], None, []
            for job_id, event in message[1]:
                job = self.jobs.get(job_id)
                if job is None:
                    continue
                loop = job.stream.loop
                if event == _CLOSED:  # a failed job's error may come after it: forget it below
                    closed.append(job_id)
                    self.state.admission.served(job.ticket)  # released, and counted in the service rate
                else:
                    calls.append((job.stream.queue.put_nowait, (event,)))
            for job_id in closed:
                del self.jobs[job_id]
                calls.append((self.state.jobs.pop, (job_id, None)))
            if calls:
                with contextlib.suppress(RuntimeError):  # the event loop is closed: nobody listens
                    loop.call_soon_threadsafe(_run_calls, calls)
        elif kind == "stats":
            self.stats = message[1]
            self.state.metrics.update_engine(self.stats)
        elif kind == "record":
            self.state.record(message[1], message[2])

    def _fail_all(self, error: APIError) -> None:
        for job_id, job in list(self.jobs.items()):
            del self.jobs[job_id]
            self.state.admission.served(job.ticket)
            with contextlib.suppress(RuntimeError):
                job.stream.loop.call_soon_threadsafe(job.stream.queue.put_nowait, ("error", error))


class _ChildLoop(EngineLoop):
    """`EngineLoop` in the engine process: a step's events go down the pipe, in one message."""

    def __init__(self, engine, tokenizer, state: _ChildState):
        super().__init__(engine, tokenizer, state)
        self.conn = state.conn

    def _send(self, job: Job, event: tuple) -> None:
        self._outbox.append((job.id, event))

    def _flush(self) -> None:
        if self._outbox:
            items, self._outbox = self._outbox, []
            self.conn.send(("events", items))

    def _close(self, job: Job) -> None:
        self.jobs.pop(job.id, None)
        if not job.done:
            job.done = True
            self._outbox.append((job.id, _CLOSED))  # after the job's last events


class _ChildState:
    """What `EngineLoop` uses of `ServerState`, in the engine process: the config, and
    metrics and log records sent to the HTTP process, which owns them."""

    def __init__(self, conn, config: ServerConfig):
        self.conn, self.config = conn, config
        self.metrics = SimpleNamespace(update_engine=lambda stats: conn.send(("stats", stats)))

    def record(self, request, reason) -> None:
        request.generator = None  # finished; a torch.Generator does not cross a pipe
        self.conn.send(("record", request, reason))


def _child_main(conn, model: GPT, engine_kwargs: dict, threads: int) -> None:
    """The engine process: build the engine, say "ready", then run the engine loop until
    told to stop or the HTTP process goes away (the pipe closes)."""
    from .engine import gemm_layout, make_engine
    from .engine_loop import engine_stats

    for sig in (signal.SIGINT, signal.SIGTERM):  # the HTTP process drains, then stops this one
        signal.signal(sig, signal.SIG_IGN)
    torch.set_num_threads(threads)
    sys.setswitchinterval(0.0005)
    try:
        engine = make_engine(gemm_layout(model), **engine_kwargs)  # this process's own copy of the model
    except Exception as e:
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", {"block_size": engine.block_size, "num_blocks": engine.allocator.num_blocks,
                         "max_len": engine.max_len, "stats": engine_stats(engine)}))
    kind, config = conn.recv()
    loop = _ChildLoop(engine, ByteTokenizer(), _ChildState(conn, config))

    def read() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = ("stop",)
            if message[0] == "add":
                _, job_id, gen, arrival = message
                loop.submit(("add", Job(job_id, gen, None, None, arrival)))
            elif message[0] == "abort":
                loop.submit(message)
            else:
                loop._stop.set()
                loop.submit(("wake",))
                return

    threading.Thread(target=read, name="course-engine-commands", daemon=True).start()
    loop._run()
