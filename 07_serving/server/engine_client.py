# GENERATED from solutions/server/engine_client.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""The one engine boundary (given code): what the HTTP side and the engine say to each other.

    HTTP side (ServerState: the host)                  engine side (EngineLoop, one thread)
    ---------------------------------                  ------------------------------------
    client.submit(Add | Abort)         ------------->  applied between two steps
    host.deliver([(job_id, event), ...])  <----------  once a step: Delta, Logprobs, Finish, Error, Closed
    host.record(request, reason)          <----------  a finished sequence (log line, metrics)
    host.update_stats(stats)              <----------  the engine between two steps (/health)

An `EngineClient` is the engine as the server sees it, one object with one verb (`submit`),
as vLLM's `EngineClient` and nano-vllm's `ModelRunner.call`: `EngineThread` (engine_loop.py,
the engine in a thread of this process) or `EngineProcess` (engine_process.py, the same loop
in a process of its own, every message above crossing a pipe). An `EngineHost` is all the
engine loop is handed of the server. Every message is a NamedTuple whose first field names
it, so that it equals the plain tuple the exercises write: 7.7's drain submits
("abort", job_id, error), 7.5's tests put ("delta", index, text) on a stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple, Protocol

from solutions.batching import Request

from .detokenizer import BYTE_TEXT, TokenText
from .protocol import APIError, GenerationRequest


class Add(NamedTuple):
    """Queue a job: its validated request, `arrival` on the engine's clock."""

    verb: Literal["add"]
    job_id: str
    gen: GenerationRequest
    arrival: float


class Abort(NamedTuple):
    """Stop a job's unfinished sequences before the next step. `reason`: the APIError its
    client is told, or a word ("disconnect", "error") when nobody is left to tell."""

    verb: Literal["abort"]
    job_id: str
    reason: APIError | str


Command = Add | Abort


class Delta(NamedTuple):
    """New text of choice `index`."""

    kind: Literal["delta"]
    index: int
    text: str


class Logprobs(NamedTuple):
    """Log-probability entries of choice `index` (`solutions.batching.logprobs.TokenLogprob`,
    the prompt's first None): its newest sampled tokens', or, `prompt` True, its prompt's
    (echo), sent before its first Delta. Only for a request that asked for them."""

    kind: Literal["logprobs"]
    index: int
    entries: tuple
    prompt: bool = False


class Finish(NamedTuple):
    """Choice `index` has finished ("stop" or "length"), with its token counts."""

    kind: Literal["finish"]
    index: int
    reason: str
    prompt_tokens: int
    completion_tokens: int


class Error(NamedTuple):
    """The job failed; its client is told `error`."""

    kind: Literal["error"]
    error: APIError


class Closed(NamedTuple):
    """The engine is done with a job (after its last event): its ticket may be released."""

    kind: Literal["closed"] = "closed"


CLOSED = Closed()
Event = Delta | Logprobs | Finish | Error


class Deadlines(NamedTuple):
    """Seconds from arrival (None: no such deadline); the engine loop enforces them (7.3)."""

    first_token_s: float | None = None
    total_s: float | None = None


class EngineInfo(NamedTuple):
    """What the server reads of an engine before it starts: its KV memory and limits, and
    its stats before any step (`engine_loop.engine_stats`)."""

    block_size: int
    num_blocks: int
    max_len: int
    vocab_size: int
    stats: dict


class EngineHost(Protocol):
    """The server as the engine loop sees it. Called from the engine's thread (or, for an
    engine in its own process, from the thread reading its pipe), never from the event loop."""

    def deliver(self, batch: list[tuple[str, Event | Closed]]) -> None: ...

    def record(self, request: Request, reason: str | None) -> None: ...

    def update_stats(self, stats: dict) -> None: ...


class EngineClient(Protocol):
    """The engine as the server sees it. `submit` is thread-safe and never blocks; `clock`
    is the engine's clock (arrivals and deadlines are measured on it)."""

    info: EngineInfo
    clock: Callable[[], float]

    def start(self, host: EngineHost, deadlines: Deadlines, text: TokenText = BYTE_TEXT) -> None:
        """Start the engine loop: its events go to `host`; `text` is the served model's
        (`detokenizer.TokenText`: each id's bytes, the end-of-sequence id)."""

    def submit(self, command: Command) -> None: ...

    def stop(self, timeout: float = 5.0) -> None: ...
