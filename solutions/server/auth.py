"""The API key (given code): every /v1/* request carries `Authorization: Bearer <key>`."""

from __future__ import annotations

import hmac

from .protocol import APIError


class BearerAuth:
    """ASGI middleware: every /v1/* request must carry `Authorization: Bearer <key>`, else
    OpenAI's 401 (a plain ASGI wrapper, so streaming and disconnects pass through
    untouched; the key is compared in constant time)."""

    def __init__(self, app, key: str):
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = APIError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'",
                                    code="invalid_api_key").response()
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
