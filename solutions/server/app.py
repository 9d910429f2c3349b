"""The HTTP side (given code): the handlers, OpenAI's response shapes, the FastAPI app."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request as HTTPRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from solutions.paged import PagedEngine

from . import tokenization
from .admission import degrade
from .choices import Choices, chunk as _chunk
from .disconnect import next_events, stream_closed, until_disconnected
from .engine_client import Error, Event, Finish
from .engine_process import EngineProcess
from .operations import add_middlewares, operator_routes
from .protocol import BODIES, APIError, bad, openapi
from .request_id import new_request_id, request_id
from .served_model import ServedTokenizer
from .state import Job, ServerConfig, ServerState
from .streaming import TokenStream, sse
from .tokenization import ENDPOINTS as TOKENIZER_ENDPOINTS
from .validation import api_error, parse_request

log = logging.getLogger("course.server")


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _whole(g, finished: int) -> int:
    """`finished` of a job's `g.num_choices` choices, as `stream_closed` (7.4) counts them,
    out of `g.n`: a batch of prompts is complete (n) only when every choice of every
    prompt has finished; cut short, it counts fewer than n."""
    return g.n if finished >= g.num_choices else min(finished, g.n - 1)


async def _stream_events(state: ServerState, job: Job, first: list[Event]) -> AsyncIterator[bytes]:
    """The SSE body of a streaming job: `first` (already received), then events until
    every choice has finished; an error becomes an event, then [DONE]. If the client goes
    away, Starlette cancels this generator: the `finally` aborts the job."""
    g = job.gen
    finished: dict[int, Finish] = {}
    choices = Choices(job, state.tokenizer)
    events = first
    try:
        while True:
            errors = [ev for ev in events if isinstance(ev, Error)]
            events = events[:events.index(errors[0])] if errors else events
            finished.update((ev.index, ev) for ev in events if isinstance(ev, Finish))
            for frame in choices.frames(events):
                yield frame
            if errors:
                yield sse(errors[0].error.body())
                yield sse("[DONE]")
                return
            if len(finished) == g.num_choices:
                if g.include_usage:
                    prompt = sum(len(p) for p in g.batch)
                    yield sse(_chunk(job, [], _usage(prompt, sum(f.completion_tokens for f in finished.values()))))
                yield sse("[DONE]")
                return
            events = await job.stream.get_batch()
    finally:
        try:
            stream_closed(state, job, _whole(g, len(finished)))
        finally:
            state.jobs.pop(job.id, None)


def _require_json(request: HTTPRequest) -> None:
    """A 415 unless the body is declared JSON: `Content-Type: application/json` (any
    parameters, e.g. `; charset=utf-8`; also `application/<x>+json`, as FastAPI accepts).
    A browser may POST `text/plain` (or a form) to any origin without a CORS preflight:
    served, that would let any web page make a local server generate."""
    declared = request.headers.get("content-type", "")
    media = declared.split(";", 1)[0].strip().lower()
    main, _, sub = media.partition("/")
    if main != "application" or not (sub == "json" or sub.endswith("+json")):
        got = f"got {declared!r}" if declared else "none was given"
        raise APIError(415, f"the request body must be declared JSON (Content-Type: application/json); {got}",
                       code="unsupported_media_type")


async def _generate(request: HTTPRequest, state: ServerState, kind: str) -> Response:
    _require_json(request)
    raw = await _read_body(request, state.config.max_body_bytes)
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad(f"the request body is not valid JSON: {e}", code="invalid_json") from None
    if kind in TOKENIZER_ENDPOINTS:  # /tokenize, /detokenize: answered here, with the tokenizer
        return JSONResponse(TOKENIZER_ENDPOINTS[kind](body, state.limits, state.tokenizer))
    gen, degraded = degrade(state.admission, parse_request(body, kind, state.limits, state.tokenizer))
    deadline = min((d for d in (gen.first_token_timeout, gen.timeout) if d is not None), default=None)
    ticket = state.admission.admit_batch([len(p) for p in gen.batch], gen.max_tokens, gen.n, gen.client, deadline)
    job = Job(_job_id(state, kind, request_id(request.scope)), gen, TokenStream(asyncio.get_running_loop()),
              ticket, arrival=state.loop.clock())
    state.add(job)
    streaming = False
    gone = asyncio.ensure_future(until_disconnected(request))
    try:
        first = await next_events(job.stream, gone)
        if first is None:  # the client left before anything came back
            state.abort(job, "disconnect")
            return Response(status_code=499)
        if isinstance(first[0], Error):  # nothing was sent yet: a real HTTP status
            return first[0].error.response()
        if gen.stream:
            streaming = True
            return StreamingResponse(_stream_events(state, job, first), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **degraded})
        answer = await _collect(state, job, first, gone)
        answer.headers.update(degraded)
        return answer
    except BaseException:  # no answer will be given (an error, a cancelled handler): stop the job
        state.abort(job, "error")
        raise
    finally:
        gone.cancel()  # a stream's disconnects are Starlette's to see from here on
        if not streaming:
            state.jobs.pop(job.id, None)


def _job_id(state: ServerState, kind: str, rid: str) -> str:
    """The response id, `cmpl-<request id>` (chat: `chatcmpl-`), as vLLM's: the engine's request
    ids and the log lines carry it. An id already in flight (a client reusing its
    `X-Request-Id`) gets a suffix of its own, so that no two jobs share one."""
    job_id = f"{'cmpl' if kind == 'completion' else 'chatcmpl'}-{rid}"
    if job_id in state.jobs or job_id in state.in_engine:
        job_id = f"{job_id}-{new_request_id()[:8]}"
    return job_id


async def _collect(state: ServerState, job: Job, events: list[Event], gone: asyncio.Future) -> Response:
    """A non-streaming answer: gather every choice's text, racing the client's departure."""
    g = job.gen
    choices = Choices(job, state.tokenizer)
    finished: dict[int, Finish] = {}
    while True:
        for ev in events:
            if isinstance(ev, Error):
                return ev.error.response()
            if isinstance(ev, Finish):
                finished[ev.index] = ev
            else:
                choices.add(ev)
        if len(finished) == g.num_choices:
            break
        events = await next_events(job.stream, gone)
        if events is None:
            state.abort(job, "disconnect")
            return Response(status_code=499)
    usage = _usage(sum(len(p) for p in g.batch), sum(f.completion_tokens for f in finished.values()))
    obj = "text_completion" if g.kind == "completion" else "chat.completion"
    return JSONResponse({"id": job.id, "object": obj, "created": job.created, "model": g.model,
                         "choices": choices.answer(finished), "usage": usage})


async def _read_body(request: HTTPRequest, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"the request body is {declared} bytes; the limit is {limit}",
                       code="request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"the request body exceeds the limit of {limit} bytes", code="request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


async def _guarded(request: HTTPRequest, state: ServerState, kind: str) -> Response:
    """`_generate`, with any unexpected exception answered as an OpenAI-shaped 500 (a client
    gone while sending its body is no error: 499, nothing logged)."""
    try:
        return await _generate(request, state, kind)
    except APIError:
        raise
    except ClientDisconnect:  # the client left while sending its body: nobody to answer
        return Response(status_code=499)
    except Exception as e:
        log.exception("handler error (request %s)", request_id(request.scope))
        return APIError(500, f"internal error: {type(e).__name__}: {e}", type="internal_error").response()


def build_app(engine: PagedEngine | EngineProcess, tokenizer: ServedTokenizer | None = None,
              config: ServerConfig | None = None) -> FastAPI:
    """The FastAPI app over `engine` (run in a thread of this process, or an
    `EngineProcess`) and the served model's `tokenizer` (None or a ByteTokenizer: the byte
    model's); the engine starts and stops with the app's lifespan. `app.state.course` is the ServerState."""
    config = config or ServerConfig()
    state = ServerState(engine, tokenizer, config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        state.start()
        try:
            yield
        finally:
            state.close()

    app = FastAPI(title="AI Engineering from Scratch — stage 07 server", lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    app.state.course = state

    @app.exception_handler(APIError)
    async def _api_error(request, exc: APIError):
        return exc.response()

    @app.exception_handler(RequestValidationError)  # a body FastAPI validated: OpenAI's 400, not its 422
    async def _invalid(request, exc: RequestValidationError):
        return api_error(exc.errors()).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, exc: StarletteHTTPException):
        kind = {404: "not_found_error", 405: "invalid_request_error"}.get(exc.status_code, "invalid_request_error")
        return APIError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", type=kind).response()

    add_middlewares(app, config)

    _routes(app, state)
    app.openapi = lambda: openapi(app, BODIES)  # the handlers read their bodies themselves (413, 415 first)
    return app


def _routes(app: FastAPI, state: ServerState) -> None:
    """The API: OpenAI's two generation endpoints and its model list; vLLM's /tokenize and
    /detokenize; then the operator's routes."""

    @app.post("/v1/completions")
    async def completions(request: HTTPRequest):
        return await _guarded(request, state, "completion")

    async def tokenizer(request: HTTPRequest):  # /tokenize and /detokenize, vLLM's paths (no /v1)
        return await _guarded(request, state, request.scope["route"].path)

    for path in TOKENIZER_ENDPOINTS:
        app.add_api_route(path, tokenizer, methods=["POST"], name=path.strip("/"))

    @app.get("/tokenizer_info")  # vLLM's (lm-eval's remote tokenizer reads it)
    async def tokenizer_info():
        return tokenization.tokenizer_info(state.limits, state.tokenizer)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: HTTPRequest):
        return await _guarded(request, state, "chat")

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": state.config.model_name, "object": "model", "created": 0,
                                            "owned_by": "ai-engineering-from-scratch",
                                            "max_model_len": state.limits.context}]}

    operator_routes(app, state)
