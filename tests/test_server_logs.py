"""Stage 07's JSON console lines are still stage 08's request log: a finished request's line,
as `course serve` prints it on stderr, parses with `parse_request_log` (08's reference) to the
same record as the `--request-log` file's line (07_serving/README.md says so)."""
from __future__ import annotations

import io
import json
import logging


def test_a_json_console_line_parses_as_the_request_log_line():
    from solutions.profiling import parse_request_log
    from solutions.server.json_logs import JsonFormatter
    from solutions.server.metrics import LOG_KEYS

    line = {k: 0.25 for k in LOG_KEYS} | {"request_id": "cmpl-a", "prompt_tokens": 3, "output_tokens": 2,
                                            "finish_reason": "length", "prefix_hit_tokens": 0}
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.Logger("course.server")  # not the process's: no other handler sees it
    logger.addHandler(handler)
    logger.info(json.dumps(line))
    logger.info("Uvicorn running on http://127.0.0.1:8000")
    log = parse_request_log(out.getvalue().splitlines())
    assert [{k: r[k] for k in LOG_KEYS} for r in log.records] == [line]
    assert [n for n, _ in log.malformed] == [2], log.malformed  # the other line is no request's
