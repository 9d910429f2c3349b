"""The API's vocabulary (given code): OpenAI-shaped errors, the server's limits, a
validated request, the chat template and the fields each endpoint accepts."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi.responses import JSONResponse

MODEL_NAME = "course-gpt"


class APIError(Exception):
    """An error the client is told about, as OpenAI shapes it:
    `{"error": {"message", "type", "param", "code"}}` with HTTP status `status`
    (and extra response `headers`, e.g. `Retry-After` on a 503)."""

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
    """What the server accepts: the model's context (prompt + max_tokens), its vocabulary,
    the most choices per request (`max_n`) and stop strings (`max_stop`), the model names
    it answers to, /v1/completions' default `max_tokens` and the most prompts it takes in
    one request (`max_prompts`)."""

    context: int
    vocab_size: int = 257
    max_n: int = 8
    max_stop: int = 4
    models: tuple[str, ...] = (MODEL_NAME,)
    default_max_tokens: int = 16  # OpenAI's default for /v1/completions
    max_prompts: int = 64         # prompts in one /v1/completions request (a list of prompts)


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

    @property
    def batch(self) -> tuple[tuple[int, ...], ...]:
        """Every prompt of the request, in order: `prompts`, or the one `prompt_ids`. Choice
        `p * n + j` of the answer is the j-th continuation of prompt p (OpenAI's indices)."""
        return self.prompts or (self.prompt_ids,)

    @property
    def num_choices(self) -> int:
        return len(self.batch) * self.n


#: The chat template for the byte-level model (it has no special tokens but EOT): each
#: message becomes `<|role|>\n` + content + `\n`, and the prompt ends with
#: `<|assistant|>\n`, the model's cue to answer. (The default model was trained on
#: Python source, not on chats: the template is a format, not a skill.)
CHAT_TEMPLATE = "<|{role}|>\n{content}\n"
CHAT_ROLES = ("system", "user", "assistant")

_COMMON = {"model", "max_tokens", "n", "stop", "temperature", "top_p", "seed", "stream", "stream_options",
           "user", "presence_penalty", "frequency_penalty", "logprobs", "logit_bias",
           "repetition_penalty", "ignore_eos", "min_tokens"}  # the last three: vLLM's, beside OpenAI's
#: The fields each kind of request may carry; any other is "Unrecognized request argument".
FIELDS = {
    "completion": _COMMON | {"prompt", "echo", "best_of", "suffix"},
    "chat": _COMMON | {"messages", "max_completion_tokens", "top_logprobs"},
}
#: Fields OpenAI accepts that this server cannot honour: fine at their no-op value
#: (None, or the value shown), a 400 naming the field otherwise.
NO_OP = {"presence_penalty": (0, 0.0), "frequency_penalty": (0, 0.0), "logprobs": (False, 0), "echo": (False,),
         "best_of": (1,), "suffix": ("",), "logit_bias": ({},), "top_logprobs": (0,)}


def render_chat(messages: list[dict]) -> str:
    """The prompt text of validated chat messages (see CHAT_TEMPLATE)."""
    return "".join(CHAT_TEMPLATE.format(role=m["role"], content=m["content"]) for m in messages) + "<|assistant|>\n"
