"""The API key (given code): every /v1/* request, and vLLM's /tokenize and /detokenize,
carries `Authorization: Bearer <key>`."""

from __future__ import annotations

import hmac

from .protocol import APIError

#: Guarded beside /v1/*: the tokenizer endpoints (vLLM's own API key guards every route but
#: /health, /metrics and the like).
GUARDED = frozenset({"/tokenize", "/detokenize"})


class BearerAuth:
    """ASGI middleware: every /v1/* request (and every request to a path in `GUARDED`) must
    carry `Authorization: Bearer <key>`, else OpenAI's 401 (a plain ASGI wrapper, so
    streaming and disconnects pass through untouched; the key is compared in constant time)."""

    def __init__(self, app, key: str):
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and (scope["path"].startswith("/v1/") or scope["path"] in GUARDED):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = APIError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'",
                                    code="invalid_api_key").response()
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
