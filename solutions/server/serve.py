"""Running a server in a thread of this process (given code): tests, notebook, demo, bench;
and waiting for one started as a process to answer."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import httpx
import uvicorn
from fastapi import FastAPI

from solutions.paged import PagedEngine

from .app import build_app
from .engine_process import EngineProcess
from .served_model import ServedTokenizer
from .shutdown import CourseServer
from .state import ServerConfig, ServerState


class ServerHandle:
    """A server running in a thread of this process (tests, notebook, demo, bench)."""

    def __init__(self, server: CourseServer, thread: threading.Thread, port: int, app: FastAPI):
        self.server, self.thread, self.port, self.app = server, thread, port, app
        self.url = f"http://127.0.0.1:{port}"
        self.error: BaseException | None = None

    @property
    def state(self) -> ServerState:
        return self.app.state.course

    def stop(self, timeout: float = 30.0) -> int | None:
        """Drain (`shutdown.drain`) and stop; return how many jobs were aborted."""
        self.server.request_stop()
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.server.should_exit = True
            self.thread.join(5)
        return self.server.drained

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_in_thread(engine: PagedEngine | EngineProcess, tokenizer: ServedTokenizer | None = None,
                    config: ServerConfig | None = None, *, host: str = "127.0.0.1", port: int = 0,
                    start_timeout: float = 10.0) -> ServerHandle:
    """Start a server on `host`:`port` (0: an ephemeral port) in a background thread and
    wait until it accepts connections; raise RuntimeError if it fails or is not up within
    `start_timeout` seconds. `tokenizer`: the served model's (None: the byte model's)."""
    config = config or ServerConfig()
    app = build_app(engine, tokenizer, config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    ucfg = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5,
                          access_log=False)  # loop and parser "auto": uvloop and httptools, as `course serve`
    server = CourseServer(ucfg, app.state.course, config.shutdown_grace_s)
    handle: ServerHandle | None = None

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as e:  # noqa: BLE001 — reported by serve_in_thread / stop
            if handle is not None:
                handle.error = e
        finally:
            sock.close()

    thread = threading.Thread(target=run, name=f"course-server-{port}", daemon=True)
    handle = ServerHandle(server, thread, port, app)
    thread.start()
    end = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > end:
            server.should_exit = True
            thread.join(5)  # never leave a half-started server running behind the error
            raise RuntimeError(f"the server did not start within {start_timeout} s"
                               + (f": {handle.error!r}" if handle.error else ""))
        time.sleep(0.01)
    return handle


def wait_until_healthy(url: str, proc: subprocess.Popen, timeout: float) -> bool:
    """True once `url`/health answers 200; False if the server's process `proc` ends first or
    `timeout` seconds pass (the caller says what failed, and stops `proc`)."""
    end = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > end:
            return False
        time.sleep(0.2)
