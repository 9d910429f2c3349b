# GENERATED from solutions/server/engine_process.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""The engine in a process of its own (given code): what `course serve` runs by default.

In one process the engine thread and the HTTP event loop share one interpreter lock: every
SSE frame the loop writes is time the model's step waits for (the stage 07 lesson measures
it). vLLM puts its engine core in a separate process from its API server; so does this:

    HTTP process                                  engine process
    ------------                                  --------------
    EngineProcess.submit(Add | Abort)  ------->   main thread: each command to the engine
    reader thread: each host call      <-------   EngineThread, its host a pipe (`_PipeHost`):
      on the server (ServerState)                   deliver / record / update_stats

Both ends are the pieces the in-process server uses: the engine process runs an
`EngineThread` whose host sends every call down the pipe, and the HTTP process's reader makes
each call on the real host. The model is handed to the new process once, at start (spawned,
so no thread of this process is copied into it); the process first loads this package under
the name it has here (`engine_boot.py`), so that every message unpickles on both sides.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import runpy
import signal
import sys
import threading
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

from solutions.batching import Request
from solutions.kv_cache import Decoder

from .detokenizer import BYTE_TEXT, TokenText
from .engine import gemm_layout, make_engine
from .engine_client import CLOSED, Closed, Command, Deadlines, EngineHost, Error, Event
from .engine_loop import EngineThread
from .json_logs import LOG_FORMAT_ENV, configure_logging
from .protocol import APIError

log = logging.getLogger("course.server")
HOST_CALLS = ("deliver", "record", "update_stats")  # what the engine process may call on the host
_BOOT = Path(__file__).with_name("engine_boot.py")


class EngineProcess:
    """The engine, started in a process of its own: an `EngineClient`. `info` comes from the
    process once it is up; RuntimeError if it fails to start within `start_timeout` s."""

    def __init__(self, model: Decoder, *, threads: int = 1, start_timeout: float = 120.0, **engine_kwargs):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        package = __name__.rpartition(".")[0]  # `course_student.server` for a learner's package
        boot = {"PACKAGE": package, "FOLDER": str(_BOOT.parent), "ARGS": (child, model, engine_kwargs, threads)}
        self.proc = ctx.Process(target=runpy.run_path, args=(str(_BOOT),),
                                kwargs={"init_globals": boot, "run_name": "__course_engine__"},
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
        self.info = facts
        self.clock = time.monotonic  # CLOCK_MONOTONIC: the same in both processes, as the engine's
        self._live: set[str] = set()  # jobs added and not yet closed (failed if the process dies)
        self._send_lock = threading.Lock()
        self._reader: threading.Thread | None = None

    def start(self, host: EngineHost, deadlines: Deadlines, text: TokenText = BYTE_TEXT) -> None:
        self._send(("start", deadlines, text))
        self._reader = threading.Thread(target=self._read, args=(host,), name="course-engine-reader", daemon=True)
        self._reader.start()

    def submit(self, command: Command) -> None:
        if command[0] == "add":
            self._live.add(command[1])
        self._send(command)

    def stop(self, timeout: float = 5.0) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._send(("stop",))
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        if self._reader is not None:
            self._reader.join(timeout)

    def _send(self, message: tuple) -> None:
        with self._send_lock:  # handlers and the drain send from the event loop, stop() from elsewhere
            self.conn.send(message)

    def _read(self, host: EngineHost) -> None:
        """The host calls the engine process makes, made here, until its pipe closes; then
        every job still in the engine fails (500) and is closed."""
        while True:
            try:
                name, args = self.conn.recv()
            except (EOFError, OSError):
                break
            try:
                if name == "deliver":
                    self._live.difference_update(job_id for job_id, ev in args[0] if isinstance(ev, Closed))
                if name in HOST_CALLS:
                    getattr(host, name)(*args)
            except Exception as e:  # never let a bad message kill the reader
                log.error("engine process message %r failed", name, exc_info=e)
        gone = Error("error", APIError(500, "the engine process exited", type="internal_error"))
        if self._live:
            host.deliver([item for job_id in sorted(self._live) for item in ((job_id, gone), (job_id, CLOSED))])
            self._live.clear()


class _PipeHost:
    """The `EngineHost` of the engine process: each call goes to the HTTP process, whose
    reader makes it on the server."""

    def __init__(self, conn):
        self.conn = conn

    def deliver(self, batch: list[tuple[str, Event | Closed]]) -> None:
        self.conn.send(("deliver", (batch,)))

    def record(self, request: Request, reason: str | None) -> None:
        request.generator = None  # finished; a torch.Generator does not cross a pipe
        self.conn.send(("record", (request, reason)))

    def update_stats(self, stats: dict) -> None:
        self.conn.send(("update_stats", (stats,)))


def freeze_heap() -> None:
    """Collect once, then move every object alive (the model, the engine, the app) out of
    all later collections (`gc.freeze`). Python's full collection walks every object a
    process holds; measured with `bench_fair.py` under a flood, one in the engine process
    stalled a step for 155 ms instead of 10-30. Called once a process has built what it
    serves with, before the first request."""
    gc.collect()
    gc.freeze()


def child_main(conn, model: Decoder, engine_kwargs: dict, threads: int) -> None:
    """The engine process: build the engine, say "ready", run it (an `EngineThread` whose
    host is the pipe), hand it each command, until told to stop or the HTTP process goes
    away (the pipe closes)."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # the HTTP process drains, then stops this one
        signal.signal(sig, signal.SIG_IGN)
    torch.set_num_threads(threads)
    sys.setswitchinterval(0.0005)
    configure_logging(os.environ.get(LOG_FORMAT_ENV, "json"))  # as the HTTP process logs (cli.py sets it)
    try:
        engine = EngineThread(make_engine(gemm_layout(model), **engine_kwargs))  # this process's copy of the model
    except Exception as e:
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    freeze_heap()
    conn.send(("ready", engine.info))
    try:
        start = conn.recv()
    except (EOFError, OSError):
        return
    if start[0] != "start":  # stopped before it was started (a server that failed to come up)
        return
    engine.start(_PipeHost(conn), *start[1:])
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message[0] not in ("add", "abort"):
            break
        engine.submit(message)
    engine.stop()
