# GENERATED from solutions/server/json_logs.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""Structured logs (given code): one JSON object a line for the whole server process, uvicorn's
own lines included, so that a log shipper parses every line the same way."""

from __future__ import annotations

import json
import logging
import sys
import time

TEXT_FORMAT = "%(asctime)s %(name)s %(message)s"
#: How the server's engine process (a process of its own) learns the format `course serve` logs in.
LOG_FORMAT_ENV = "COURSE_LOG_FORMAT"


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: `time` (UTC, ISO 8601 with milliseconds), `level`,
    `logger`, `message`; a message that is itself a JSON object (the server's request log
    line) has its keys merged in, not kept as a string (so the line still parses as a request
    log line: stage 08's `parse_request_log` keeps extra keys); an exception's traceback as
    `exc_info`."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        out: dict = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                     + f".{int(record.msecs):03d}Z", "level": record.levelname, "logger": record.name}
        try:
            obj = json.loads(message) if message.startswith("{") else None
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            out = {**out, "message": "request finished", **obj}
        else:
            out["message"] = message
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(fmt: str = "json", stream=None) -> None:
    """Every logger of the process (the server's, uvicorn's) at INFO through one handler on
    `stream` (default stderr), as JSON lines (`fmt` "json") or `TEXT_FORMAT` ("text").
    Replaces the root logger's handlers; uvicorn must then be run with `log_config=None`,
    so that its loggers propagate here instead of printing plain text of their own."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)  # the root's INFO (uvicorn.Config's log_level may set its own)
