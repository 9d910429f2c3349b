# GENERATED from solutions/server/operations.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""What an operator sets and reads (given code): the middlewares every request passes (the API
key, an opt-in CORS policy, request ids), and the routes /version, /health and /metrics."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from .auth import BearerAuth
from .request_id import RequestIdMiddleware
from .state import ServerConfig, ServerState


def server_version() -> str:
    """This course's version (its installed package's metadata; "unknown" where it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ai-engineering-from-scratch")
    except PackageNotFoundError:
        return "unknown"


def add_middlewares(app: FastAPI, config: ServerConfig) -> None:
    """The API key's check innermost, then CORS (opt-in, outside the key check: a browser's
    preflight carries no key), then request ids outermost (so that a 401 carries one too)."""
    if config.api_key is not None:
        app.add_middleware(BearerAuth, key=config.api_key)
    if config.allowed_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(config.allowed_origins), allow_methods=["GET", "POST"],
                           allow_headers=["authorization", "content-type", "x-request-id"],
                           expose_headers=["x-request-id"])
    app.add_middleware(RequestIdMiddleware)  # Starlette runs the last added first


def operator_routes(app: FastAPI, state: ServerState) -> None:
    """What an operator reads: /version (vLLM's), /health and /metrics."""

    @app.get("/version")
    async def version():
        return {"version": server_version()}

    @app.get("/health")
    async def health():
        status = "draining" if state.admission.draining else "ok"
        return JSONResponse({"status": status, **state.stats, "in_flight": len(state.jobs),
                             "reserved_blocks": state.admission.reserved_blocks,
                             "admitted": state.admission.admitted, "rejected": state.admission.rejected},
                            status_code=200 if status == "ok" else 503)

    @app.get("/metrics")
    async def metrics():
        return Response(state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
