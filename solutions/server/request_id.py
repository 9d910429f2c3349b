"""Request ids (given code): `X-Request-Id`, honoured if the client sends one, made if not, and
sent back on every response, as vLLM does with `--enable-request-id-headers` (and as its
OpenAI server bases the response id on it: `cmpl-<id>`)."""

from __future__ import annotations

import re
import uuid

from .protocol import bad

HEADER = "X-Request-Id"
#: What a client's id may be: 1 to 128 visible ASCII characters (no spaces, no control
#: characters: it goes into response ids, log lines and a response header as it came).
VALID = re.compile(r"[\x21-\x7e]{1,128}")


def new_request_id() -> str:
    """A fresh id: 32 hex digits (uuid4, as vLLM's `random_uuid`)."""
    return uuid.uuid4().hex


def request_id(scope) -> str:
    """The id of the request in `scope` (an ASGI scope, or a Starlette request's `.scope`),
    as `RequestIdMiddleware` set it; a fresh one outside it."""
    return scope.get("state", {}).get("request_id") or new_request_id()


class RequestIdMiddleware:
    """ASGI middleware, outermost: every HTTP request gets an id (the client's `X-Request-Id`
    if it sent a valid one, else `new_request_id()`), kept in `scope["state"]["request_id"]`
    and sent back in every response's `X-Request-Id` header, errors included. A malformed
    id is OpenAI's 400 naming the header (`param`), with a fresh id in its own header."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = [v for k, v in scope["headers"] if k == b"x-request-id"]
        rid = given[0].decode("latin-1") if given else None
        problem = None
        if len(given) > 1:
            problem = f"send one {HEADER} header, not {len(given)}"
        elif rid is not None and not VALID.fullmatch(rid):
            problem = (f"{HEADER} must be 1 to 128 visible ASCII characters (no spaces or control characters); "
                       f"got {len(rid)} characters: {rid[:40]!r}")
        if problem:
            rid = new_request_id()
        scope.setdefault("state", {})["request_id"] = rid = rid or new_request_id()

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                message = {**message, "headers": headers + [(b"x-request-id", rid.encode("latin-1"))]}
            await send(message)

        if problem:
            await bad(problem, param=HEADER, code="invalid_request_id").response()(scope, receive, send_with_id)
            return
        await self.app(scope, receive, send_with_id)
