# GENERATED from solutions/server/protocol.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""The API's vocabulary (given code): OpenAI-shaped errors, the server's limits, a
validated request, the chat template and the request bodies (pydantic models)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.json_schema import models_json_schema
from pydantic_core import PydanticCustomError

MODEL_NAME = "course-gpt"
#: The most alternatives a token's log-probabilities may list (completions' `logprobs`, chat's `top_logprobs`):
#: vLLM's default `max_logprobs`, and OpenAI's chat limit (its legacy completions stop at 5).
MAX_LOGPROBS = 20
MAX_PRIORITY = 100  # `priority` (vLLM's; lower first) is 0..this: a client may step back, never cut in
MAX_USER = 256  # the longest `user` (the client the engine shares itself fairly with) a request may name


class APIError(Exception):
    """An error the client is told about, as OpenAI shapes it: `{"error": {"message", "type",
    "param", "code"}}` with HTTP status `status` (and response `headers`: `Retry-After` on a 503)."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def __reduce__(self):  # picklable (the engine process sends errors to the HTTP process)
        return _api_error, (self.status, self.message, self.type, self.param, self.code, self.headers)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def _api_error(status, message, type, param, code, headers) -> APIError:
    return APIError(status, message, type=type, param=param, code=code, headers=headers)


def bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    """A 400 `invalid_request_error` naming the field `param`."""
    return APIError(400, message, param=param, code=code)


@dataclass(frozen=True)
class Limits:
    """What the server accepts: the model's context (prompt + max_tokens), its vocabulary, the
    most choices per request (`max_n`) and stop strings (`max_stop`), the model names it answers
    to, /v1/completions' default `max_tokens`, the most prompts in one request (`max_prompts`),
    and its deadlines (`first_token_timeout`, `timeout`; seconds, None: none)."""

    context: int
    vocab_size: int = 257
    max_n: int = 8
    max_stop: int = 4
    models: tuple[str, ...] = (MODEL_NAME,)
    default_max_tokens: int = 16  # OpenAI's default for /v1/completions
    max_prompts: int = 64         # prompts in one /v1/completions request (a list of prompts)
    first_token_timeout: float | None = None  # the server's deadlines (s): a request's own may only be shorter
    timeout: float | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """A validated request: everything the engine needs, nothing the client can break.
    `top_p` is None when it would change nothing (absent or 1); `temperature` a float."""

    kind: str                       # "completion" or "chat"
    model: str
    prompt_ids: tuple[int, ...]
    max_tokens: int
    n: int = 1
    stop: tuple[str, ...] = ()
    temperature: float = 1.0
    top_p: float | None = None
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    repetition_penalty: float = 1.0   # vLLM's sampling extras: 1.0, False, 0 change nothing
    ignore_eos: bool = False
    min_tokens: int = 0
    prompts: tuple[tuple[int, ...], ...] = ()   # a completion's batch of prompts; () = just prompt_ids
    logprobs: int | None = None   # top alternatives per token (completions' logprobs, chat's top_logprobs)
    echo: bool = False            # a completion answers its prompt first (with its logprobs, if asked)
    echo_only: bool = False       # echo with max_tokens 0: the engine makes 1 token, the answer drops it
    client: str = ""              # who sent it (the body's `user`): the engine shares itself fairly between clients
    first_token_timeout: float | None = None  # its deadlines (s): its own, else the server's
    timeout: float | None = None
    priority: int = 0             # lower runs first (0..MAX_PRIORITY: a client may only step back)

    @property
    def batch(self) -> tuple[tuple[int, ...], ...]:
        """Every prompt of the request, in order: `prompts`, or the one `prompt_ids`. Choice
        `p * n + j` of the answer is the j-th continuation of prompt p (OpenAI's indices)."""
        return self.prompts or (self.prompt_ids,)

    @property
    def num_choices(self) -> int:
        return len(self.batch) * self.n


#: The chat template for the byte-level model (it has no special tokens but EOT): each message becomes
#: `<|role|>\n` + content + `\n`, and the prompt ends with `<|assistant|>\n`, the model's cue to answer.
#: (The default model was trained on Python source, not on chats: the template is a format, not a skill.)
CHAT_TEMPLATE = "<|{role}|>\n{content}\n"
CHAT_ROLES = ("system", "user", "assistant")


# ---- the request bodies, as pydantic models (what /openapi.json publishes) -----------------------
# Strict: an int is never a bool (True is not 1) nor a float (4.0 is not 4); a number may be an int.
# Each field's `description` is its rule; a 400 says "<field> must be <description>, got <value>" (api_error);
# what depends on this server's Limits and on 7.1's budget (n, max_tokens) is checked after the schema.

class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Number = Annotated[float, Field(allow_inf_nan=False)]  # an int or a finite float
TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
Text = Annotated[str, Field(min_length=1)]
#: n, max_tokens, max_completion_tokens: 7.1's `token_budget` judges them (their bounds are the context
#: the prompt leaves and `Limits.max_n`), so the schema only documents them.
Budget = Annotated[Any, WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]})]


def _no_op(*values) -> Any:
    """A field OpenAI has that this server cannot honour: allowed at its no-op `values` or null."""
    return Field(None, description=f"{' or '.join(map(repr, values))} (this server does not implement it)")


class StreamOptions(_Body):
    include_usage: bool = Field(False, description="a boolean")


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ChatMessage(_Body):
    role: Literal[CHAT_ROLES] = Field(description=f"one of {list(CHAT_ROLES)}")
    content: str | list[TextPart] = Field(description="a string or a list of text parts")
    name: str | None = Field(None, description="a string")

    @property
    def text(self) -> str:
        """The content as one string (its text parts joined)."""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class _GenerationBody(_Body):
    """The fields both endpoints take (a 400 names the first that fails: these in this
    order, then the endpoint's own)."""

    model: str = Field(description="the name of a model this server has (GET /v1/models)")
    stop: Text | list[Text] | None = Field(None, description="a non-empty string or a list of them "
                                                               "(as many as the server allows)")
    temperature: Number | None = Field(None, ge=0, le=2, description="a number in [0, 2]")
    top_p: Number | None = Field(None, gt=0, le=1, description="a number in (0, 1]")
    seed: int | None = Field(None, description="an integer")
    stream: bool | None = Field(None, description="a boolean")
    stream_options: StreamOptions | None = Field(None, description="an object with only include_usage "
                                                                   "(only when stream is true)")
    repetition_penalty: Number | None = Field(None, gt=0, description="a number > 0 (1 = off)")  # vLLM's
    ignore_eos: bool | None = Field(None, description="a boolean")                               # vLLM's
    min_tokens: int | None = Field(None, ge=0, description="an integer >= 0 (at most max_tokens)")  # vLLM's
    user: str | None = Field(None, max_length=MAX_USER, description=f"a string of at most {MAX_USER} characters")
    first_token_timeout: Number | None = Field(None, gt=0, description="seconds > 0 (at most the server's)")
    timeout: Number | None = Field(None, gt=0, description="seconds > 0 (at most the server's)")
    priority: int | None = Field(None, ge=0, le=MAX_PRIORITY, description=f"an integer in 0..{MAX_PRIORITY}")
    n: Budget = Field(None, description="an integer >= 1 (as many choices as the server allows)")
    max_tokens: Budget = Field(None, description="an integer >= 1 that fits the context with the prompt")
    presence_penalty: Literal[0] | None = _no_op(0)
    frequency_penalty: Literal[0] | None = _no_op(0)
    logit_bias: Annotated[dict, Field(max_length=0)] | None = _no_op({})

    @model_validator(mode="after")
    def _options_need_a_stream(self):  # the one rule that spans two fields
        if self.stream_options is not None and not self.stream:
            raise PydanticCustomError("stream_options", "stream_options are only allowed when stream is true",
                                      {"param": "stream_options"})
        return self


class CompletionRequest(_GenerationBody):
    """POST /v1/completions: a prompt (text, token ids, or a batch of either)."""

    prompt: Text | TokenIds | Annotated[list[Text | TokenIds], Field(min_length=1)] = Field(
        description="a non-empty string or a non-empty list of token ids, or a list of those (a batch)")
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS, description=f"an integer in 0..{MAX_LOGPROBS} "
                                 "(each token's log-probability and that many alternatives)")
    echo: bool | None = Field(None, description="a boolean (true: the answer starts with the prompt; "
                                                "max_tokens may then be 0)")
    best_of: Literal[1] | None = _no_op(1)
    suffix: Literal[""] | None = _no_op("")


class ChatCompletionRequest(_GenerationBody):
    """POST /v1/chat/completions: messages, rendered by CHAT_TEMPLATE."""

    messages: list[ChatMessage] = Field(min_length=1, description="a non-empty list of messages")
    max_completion_tokens: Budget = Field(None, description="max_tokens' newer name (wins when set)")
    logprobs: bool | None = Field(None, description="a boolean (true: each answer token's log-probability)")
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS, description=f"an integer in 0..{MAX_LOGPROBS} "
                                     "(alternatives per token; needs logprobs true)")

    @model_validator(mode="after")
    def _top_needs_logprobs(self):  # OpenAI's rule, vLLM's wording
        if self.top_logprobs and not self.logprobs:
            raise PydanticCustomError("top_logprobs", "when using top_logprobs, logprobs must be set to true",
                                      {"param": "top_logprobs"})
        return self


# ---- vLLM's tokenizer endpoints (POST /tokenize, POST /detokenize: no /v1), its field names and
# defaults (vllm/entrypoints/serve/tokenize/protocol.py); `model` may be left out: the served model.
_MODEL = "the name of a model this server has (GET /v1/models); null: the one it serves"
_TOKEN_STRS = "a boolean (true: also token_strs, each token's string as Hugging Face writes it)"
_SPECIAL = "a boolean (this server's tokenizer adds no special token such as BOS: it changes nothing)"


class TokenizeCompletionRequest(_Body):
    """POST /tokenize with a prompt: its token ids, as /v1/completions encodes a text prompt."""

    model: str | None = Field(None, description=_MODEL)
    prompt: str = Field(description="a string")
    add_special_tokens: bool | None = Field(None, description=_SPECIAL)  # vLLM's default: true
    return_token_strs: bool | None = Field(None, description=_TOKEN_STRS)


class TokenizeChatRequest(_Body):
    """POST /tokenize with messages: the ids of the prompt /v1/chat/completions renders from them."""

    model: str | None = Field(None, description=_MODEL)
    messages: list[ChatMessage] = Field(min_length=1, description="a non-empty list of messages")
    add_generation_prompt: bool | None = Field(None, description="a boolean (default true: end with the "
                                                                 "assistant cue, as the chat endpoint does)")
    continue_final_message: bool | None = Field(None, description="a boolean (default false; true: end inside "
                                                                  "the last message, without the cue)")
    add_special_tokens: bool | None = Field(None, description=_SPECIAL)  # vLLM's default: false
    return_token_strs: bool | None = Field(None, description=_TOKEN_STRS)

    @model_validator(mode="after")
    def _one_ending(self):
        if self.continue_final_message and self.add_generation_prompt is not False:
            raise PydanticCustomError("continue_final_message", "continue_final_message and add_generation_prompt "
                                      "cannot both be true (add_generation_prompt defaults to true)",
                                      {"param": "continue_final_message"})
        return self


class DetokenizeRequest(_Body):
    """POST /detokenize: token ids back to text."""

    model: str | None = Field(None, description=_MODEL)
    tokens: list[Annotated[int, Field(ge=0)]] = Field(description="a list of token ids (integers >= 0)")


#: The body each kind of request is, and the path it is posted to (/tokenize: either of two).
REQUESTS = {"completion": CompletionRequest, "chat": ChatCompletionRequest}
BODIES: dict[str, type[BaseModel] | tuple[type[BaseModel], ...]] = {
    "/v1/completions": CompletionRequest, "/v1/chat/completions": ChatCompletionRequest,
    "/tokenize": (TokenizeCompletionRequest, TokenizeChatRequest), "/detokenize": DetokenizeRequest}


def openapi(app: FastAPI, bodies: dict[str, type[BaseModel] | tuple[type[BaseModel], ...]]) -> dict:
    """`app.openapi` for handlers that read their body themselves (to refuse a 413 or 415
    before parsing it): FastAPI's document, each POST path in `bodies` given its request
    body's schema (the models' definitions under components/schemas, as FastAPI puts them;
    a tuple of models: any one of them)."""
    if app.openapi_schema is None:
        doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
        each = {path: m if isinstance(m, tuple) else (m,) for path, m in bodies.items()}
        refs, defs = models_json_schema([(m, "validation") for ms in each.values() for m in ms],
                                        ref_template="#/components/schemas/{model}")
        doc.setdefault("components", {}).setdefault("schemas", {}).update(defs["$defs"])
        for path, models in each.items():
            schemas = [refs[(m, "validation")] for m in models]
            schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
            doc["paths"][path]["post"]["requestBody"] = {
                "required": True, "content": {"application/json": {"schema": schema}}}
        app.openapi_schema = doc
    return app.openapi_schema


def render_chat(messages: list[dict], add_generation_prompt: bool = True) -> str:
    """The prompt text of validated chat messages (see CHAT_TEMPLATE); without the
    assistant cue when `add_generation_prompt` is False (POST /tokenize may ask for that)."""
    text = "".join(CHAT_TEMPLATE.format(role=m["role"], content=m["content"]) for m in messages)
    return text + "<|assistant|>\n" if add_generation_prompt else text
