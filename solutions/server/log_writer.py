"""The request log off the engine's path (given code): a finished request's line goes through a
queue to a thread of its own, which writes it to the console (the `course.server` logger) and
to `--request-log FILE`: the standard library's QueueHandler and QueueListener.

Written where it is produced, a line costs the thread that produced it a write, and a flush,
to a disk or a terminal that may be slow: the engine's thread (`--in-process`) or the thread
that carries the engine process's events to the clients. The source's service saw its latency
jitter come from exactly that, synchronous log writes on a saturated disk
(`07_serving/bench_host.py --slow-log-ms MS` measures it with a slow sink)."""

from __future__ import annotations

import logging
import queue
from logging.handlers import QueueHandler, QueueListener


class _ToLogger(logging.Handler):
    """Hands a record to a logger (its handlers, and its parents'), from the writer's thread."""

    def __init__(self, logger: logging.Logger):
        super().__init__()
        self.logger = logger

    def emit(self, record: logging.LogRecord) -> None:
        self.logger.handle(record)


class RequestLogWriter:
    """`write(text)` queues one line and returns at once; a thread of its own hands it to
    `logger` and appends it to `path` (None: no file), in order. `flush()` waits until every
    line queued so far is written; `close()` writes what is queued, then stops the thread."""

    def __init__(self, logger: logging.Logger, path: str | None = None):
        self.queue: queue.Queue = queue.Queue()
        self._log = logging.Logger(logger.name)  # a private one: only this writer's queue handles it
        self._log.addHandler(QueueHandler(self.queue))
        self._file = None
        handlers: list[logging.Handler] = [_ToLogger(logger)]
        if path is not None:
            self._file = logging.FileHandler(path, mode="a", encoding="utf-8")  # flushed after each line
            self._file.setFormatter(logging.Formatter("%(message)s"))
            handlers.append(self._file)
        self._listener = QueueListener(self.queue, *handlers)
        self._listener.start()
        self._open = True

    def write(self, text: str) -> None:
        self._log.info(text)

    def flush(self) -> None:
        self.queue.join()

    def close(self) -> None:
        if self._open:  # idempotent: the listener stops once
            self._open = False
            self._listener.stop()
        if self._file is not None:
            self._file.close()
