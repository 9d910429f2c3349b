# GENERATED from solutions/server/__init__.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""Stage 07: serving — an OpenAI-compatible HTTP server over the paged engine.

The files, in exercise order (the lesson is in 07_serving.ipynb), then the given ones:

    validation.py   token_budget; parse_request (given): a body or a 4xx      7.1
    admission.py    AdmissionControl (admit, release), request_blocks; degrade  7.2
    deadlines.py    deadline_reason; the 504 a late request gets              7.3
    disconnect.py   until_disconnected, next_events, stream_closed            7.4
    streaming.py    TokenStream (put, get_batch), sse                         7.5
    metrics.py      request_log, Metrics (observe_finished)                   7.6
    shutdown.py     drain; CourseServer, uvicorn with a drain first           7.7
    lanes.py        lane, lane_rank; LaneBatching: priority lanes             7.8
    app.py          the handlers, OpenAI's response shapes, build_app         given
    auth.py         BearerAuth: the API key on /v1/*                          given
    cli.py          main: `python -m solutions.server` (and __main__.py)      given
    demo.py         demo                                                      given
    detokenizer.py  token ids -> text deltas (from token bytes), stop strings  given
    engine.py       make_engine (the engine the server runs), gemm_layout     given
    engine_client.py   the engine boundary: EngineClient, EngineHost, messages  given
    engine_loop.py  EngineLoop, EngineThread: the one thread that touches it   given
    engine_process.py  EngineProcess: the engine in a process of its own      given
    fairness.py     FairBatching: the engine shared fairly between clients    given
    engine_boot.py  the engine process's first code (loads this package)     given
    hf_export.py    the model as a Hugging Face folder (for vLLM, transformers) given
    json_logs.py    configure_logging: one JSON object a log line (uvicorn's too)  given
    log_writer.py   RequestLogWriter: the request log through a queue and a thread  given
    operations.py   the middlewares (key, CORS, ids); /version, /health, /metrics  given
    protocol.py     APIError, Limits, GenerationRequest, the chat template    given
    request_id.py   RequestIdMiddleware: X-Request-Id, honoured or made       given
    serve.py        serve_in_thread, ServerHandle                             given
    served_model.py the model served (--model smollm2|default|PATH), its tokenizer  given
    state.py        ServerConfig, Job, ServerState (the engine's host)        given
    tracing.py      RequestTracer: OpenTelemetry spans per request (optional)  given
"""

from .admission import DEGRADED_HEADER, AdmissionControl, Ticket, degrade, request_blocks
from .app import build_app
from .cli import main
from .deadlines import deadline_error, deadline_reason
from .demo import demo
from .detokenizer import BYTE_TEXT, Detokenizer, TokenText
from .disconnect import next_events, stream_closed, until_disconnected
from .engine import gemm_layout, make_engine
from .engine_client import EngineClient, EngineHost
from .engine_loop import EngineLoop, EngineThread, engine_stats
from .engine_process import EngineProcess
from .fairness import FairBatching
from .lanes import LaneBatching, lane, lane_rank
from .metrics import LOG_KEYS, Metrics, request_log
from .protocol import CHAT_ROLES, CHAT_TEMPLATE, MODEL_NAME, APIError, GenerationRequest, Limits, render_chat
from .serve import ServerHandle, serve_in_thread
from .served_model import ServedModel, ServedTokenizer, default_model, load_served
from .shutdown import CourseServer, drain
from .state import Job, ServerConfig, ServerState
from .streaming import TokenStream, sse
from .tracing import RequestTracer
from .validation import parse_request, token_budget

__all__ = [
    "APIError", "Limits", "GenerationRequest", "CHAT_TEMPLATE", "render_chat", "parse_request", "token_budget",
    "Ticket", "AdmissionControl", "request_blocks", "degrade", "DEGRADED_HEADER", "deadline_reason",
    "until_disconnected", "next_events",
    "stream_closed",
    "TokenStream", "sse", "Detokenizer", "TokenText", "BYTE_TEXT", "LOG_KEYS", "request_log", "Metrics", "drain",
    "ServerConfig", "ServerState", "Job", "EngineClient", "EngineHost", "EngineLoop", "EngineThread", "EngineProcess",
    "build_app", "make_engine", "FairBatching", "LaneBatching", "lane", "lane_rank", "gemm_layout",
    "ServerHandle", "RequestTracer",
    "serve_in_thread", "main", "demo", "ServedModel", "ServedTokenizer", "default_model", "load_served",
]
