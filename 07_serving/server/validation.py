# GENERATED from solutions/server/validation.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 07_serving/07_serving.ipynb. Exercises in this file (line of each hole, then the commands):
#   7.1 The token budget: n and max_tokens against the context: line 40; `course check 7.1`, `course hint 7.1`
"""7.1 Request validation: what a request may cost (token_budget), then the rest of the body
(the schema of protocol.py, the server's limits) and the 400 a refused body gets."""

from __future__ import annotations

import re
import reprlib

from pydantic import ValidationError

from solutions.checks import is_int

from . import protocol as schema
from .protocol import REQUESTS, APIError, GenerationRequest, Limits, bad
from .served_model import ServedTokenizer, as_served


def token_budget(body: dict, kind: str, prompt_tokens: int, limits: Limits) -> tuple[int, int]:
    """The two numbers that size a request's KV memory, checked at the edge.

    Args: `body` the decoded JSON object (not modified; a field absent or `null` takes its
    default); `kind` "completion" or "chat"; `prompt_tokens` the prompt's length, which
    leaves `left = limits.context - prompt_tokens` positions for the answer.
    Returns: `(max_tokens, n)`, plain ints, 1 <= n <= limits.max_n, 1 <= max_tokens <= left.
    Rules ("an int" is `is_int`: never a bool, True is not 1; never a float, 4.0 is not 4):
      n           an int in 1..limits.max_n; default 1.
      the prompt  leaves room for at least one generated token (left >= 1).
      max_tokens  an int >= 1, at most `left`; default min(limits.default_max_tokens, left)
                  for a completion, all of `left` for chat. For chat a set (not null)
                  "max_completion_tokens" replaces it: its value is judged, its name named.
    Raises: APIError 400 (`bad(...)`), `param` naming the field: "n" (no code); "prompt",
    code "context_length_exceeded"; the max_tokens field, no code when not an int >= 1,
    code "context_length_exceeded" when over `left`. When several rules fail, the 400 names
    the field the client must fix first: a bad n (judged without the prompt) wins over
    everything; a prompt that leaves no room wins over anything wrong with max_tokens (no
    max_tokens could fix it, and its default and bound depend on `left`)."""
    raise NotImplementedError('Exercise 7.1: The token budget: n and max_tokens against the context — see 07_serving.ipynb')


_BYTES = as_served(None)  # parse_request's default tokenizer: the byte model's (it holds no state)


def parse_request(body: object, kind: str, limits: Limits, tokenizer: ServedTokenizer = _BYTES) -> GenerationRequest:
    """Validate a decoded JSON body for `kind` ("completion" or "chat"; anything else is a
    ValueError) against `limits` (given code, but for `token_budget`); return the
    GenerationRequest or raise APIError, whose `param` names the field. In this order:
    a body that is not an object (400); the schema (`protocol.REQUESTS[kind]`: a 400 from
    `api_error`, an unknown field first); a `model` not in limits.models (404, code
    "model_not_found"); this server's limits on the prompt (at most max_prompts of them,
    token ids below vocab_size; a text the tokenizer cannot spell) and on `stop` (at most
    max_stop); `token_budget` (n, the prompt's length against the context, max_tokens) on
    the prompt's tokens (chat: of the messages rendered by the model's chat template; a
    batch: of its longest prompt, so every prompt gets the same max_tokens); then
    `min_tokens` over max_tokens (`echo` with max_tokens 0: judged as 1, made `echo_only`);
    the deadlines (`deadlines`).
    A batch of exactly one prompt, `[p]`, is `p`. `null` is
    the default for every optional field: no stop, temperature 1.0, top_p None (also for
    1), stream False, repetition_penalty 1.0, ignore_eos False, min_tokens 0, logprobs None
    (chat: `top_logprobs`, default 0, when `logprobs` is true), echo False."""
    if kind not in REQUESTS:
        raise ValueError(f"kind must be 'completion' or 'chat', got {kind!r}")
    if not isinstance(body, dict):
        raise bad(f"the request body must be a JSON object, got {type(body).__name__}")
    try:
        req = REQUESTS[kind].model_validate(body)
    except ValidationError as e:
        raise api_error(e.errors(), _RULES_OF[kind]) from None
    check_model(req.model, limits)
    batch = _prompt_ids(req, limits, tokenizer)
    stop = [] if req.stop is None else [req.stop] if isinstance(req.stop, str) else req.stop
    if len(stop) > limits.max_stop:
        raise bad(f"stop must be a non-empty string or a list of at most {limits.max_stop} of them", param="stop")
    # the longest prompt decides: every prompt of a batch gets the same max_tokens. echo with
    # max_tokens 0 (vLLM's rule): the engine makes one token, which the answer drops
    echo_only = kind == "completion" and bool(req.echo) and is_int(body.get("max_tokens")) and body["max_tokens"] == 0
    max_tokens, n = token_budget({**body, "max_tokens": 1} if echo_only else body, kind,
                                 max(len(p) for p in batch), limits)
    min_tokens = req.min_tokens or 0
    if min_tokens > max_tokens:
        raise bad(f"min_tokens={min_tokens} must not exceed max_tokens={max_tokens}", param="min_tokens")
    options = req.stream_options
    logprobs = req.logprobs if kind == "completion" else (req.top_logprobs or 0) if req.logprobs else None
    return GenerationRequest(kind, req.model, tuple(batch[0]), max_tokens, n, tuple(stop),
                             1.0 if req.temperature is None else float(req.temperature),
                             None if req.top_p is None or req.top_p == 1 else float(req.top_p), req.seed,
                             bool(req.stream), options is not None and options.include_usage,
                             1.0 if req.repetition_penalty is None else float(req.repetition_penalty),
                             bool(req.ignore_eos), min_tokens,
                             tuple(tuple(p) for p in batch) if len(batch) > 1 else (), logprobs,
                             kind == "completion" and bool(req.echo), echo_only, req.user or "",
                             priority=req.priority or 0, **deadlines(req, limits))


def deadlines(req: schema.CompletionRequest | schema.ChatCompletionRequest, limits: Limits) -> dict:
    """A request's first-token and total deadlines (seconds): its own `first_token_timeout`
    and `timeout`, else the server's; its own may not exceed the server's (a 400 naming the
    field: a client cannot buy more time than the server gives anyone)."""
    out = {}
    for name in ("first_token_timeout", "timeout"):
        own, most = getattr(req, name), getattr(limits, name)
        if own is not None and most is not None and own > most:
            raise bad(f"{name}={own:g} s is longer than this server allows ({most:g} s)", param=name)
        out[name] = float(own) if own is not None else most
    return out


def check_model(model: str, limits: Limits) -> None:
    """A 404 (param "model", code "model_not_found") unless `model` is one of limits.models."""
    if model not in limits.models:
        raise APIError(404, f"The model `{model}` does not exist; this server has {list(limits.models)}",
                       param="model", code="model_not_found")


#: How a 400 words a field that is absent or null but required (OpenAI's wording for `model`).
_MISSING = {"model": "you must provide a model parameter", "prompt": "you must provide a prompt",
            "messages": "you must provide messages"}
#: Each field's rule, as its `description` states it ("messages[]" is one message).
_RULES = {
    **{name: f.description for m in REQUESTS.values() for name, f in m.model_fields.items()},
    **{f"messages[].{name}": f.description for name, f in schema.ChatMessage.model_fields.items()},
    **{f"stream_options.{name}": f.description for name, f in schema.StreamOptions.model_fields.items()},
    "messages[]": "an object with role and content (and optionally a name)",
}
#: Each endpoint's own (a field both have may mean two things: `logprobs`).
_RULES_OF = {kind: {**_RULES, **{name: f.description for name, f in m.model_fields.items()}}
             for kind, m in REQUESTS.items()}


def api_error(errors: list[dict], rules: dict[str, str | None] | None = None) -> APIError:
    """The 400 for a body the schema refuses (`ValidationError.errors()`, or FastAPI's
    `RequestValidationError.errors()`, whose locations start with "body"), naming the first
    field at fault as OpenAI does (an unknown field before anything else; "messages[0].role"
    for a nested one): "<param> must be <rule>, got <value>", the rule the field's
    description (`rules`: each field's, the generation endpoints' by default); a rule of our
    own (its context names the param) says its own message."""
    errors = [{**e, "loc": tuple(e["loc"][1:] if e["loc"][:1] == ("body",) else e["loc"])} for e in errors]
    e = min(errors, key=lambda e: not (e["type"] == "extra_forbidden" and len(e["loc"]) == 1))
    loc, kind = e["loc"], e["type"]
    if "param" in (e.get("ctx") or {}):
        return bad(e["msg"], param=e["ctx"]["param"])
    if not loc:
        return bad(f"the request body is not valid: {e['msg']}")
    param = _param(loc)
    if kind == "extra_forbidden" and len(loc) == 1:
        return bad(f"Unrecognized request argument supplied: {param}", param=param)
    if param in _MISSING and (kind == "missing" or e["input"] is None):
        return bad(_MISSING[param], param=param)
    rule = (_RULES if rules is None else rules).get(re.sub(r"\[\d+\]", "[]", param)) or "valid"
    if kind == "extra_forbidden":
        return bad(f"{param} must be {rule}; {loc[-1]!r} is not one of its fields", param=param)
    got = "" if kind == "missing" else f", got {reprlib.repr(e['input'])}"
    return bad(f"{param} must be {rule}{got}", param=param)


_NESTED = frozenset(schema.ChatMessage.model_fields) | frozenset(schema.StreamOptions.model_fields)


def _param(loc: tuple) -> str:
    """An error's location as OpenAI names a field: ("messages", 0, "role") is
    "messages[0].role"; a union member's label or an unknown key ends it."""
    param = str(loc[0])
    for part in loc[1:]:
        if isinstance(part, int):
            param += f"[{part}]"
        elif part in _NESTED:
            param += f".{part}"
        else:
            break
    return param


def _prompt_ids(req: schema.CompletionRequest | schema.ChatCompletionRequest, limits: Limits,
                tokenizer: ServedTokenizer) -> list[list[int]]:
    """The prompts' token ids, one list per prompt: a completion's `prompt` (a string, a
    list of token ids, or a batch of either), at most `limits.max_prompts` of them, every
    id below `limits.vocab_size`; or a chat's messages rendered by the model's chat template."""
    tokenizer = as_served(tokenizer)
    if isinstance(req, schema.ChatCompletionRequest):
        messages = [{"role": m.role, "content": m.text} for m in req.messages]
        return [tokenizer.encode(tokenizer.render_chat(messages), param="messages")]
    prompt = req.prompt
    batch = [prompt] if isinstance(prompt, str) or isinstance(prompt[0], int) else prompt
    if len(batch) > limits.max_prompts:
        raise bad(f"a request may hold at most {limits.max_prompts} prompts, got {len(batch)}", param="prompt")
    ids = [tokenizer.encode(p) if isinstance(p, str) else p for p in batch]
    for i, p in enumerate(ids):
        if isinstance(batch[i], list) and max(p) >= limits.vocab_size:
            where = f"prompt[{i}]" if batch is prompt else "prompt"
            raise bad(f"{where}: token ids must be in 0..{limits.vocab_size - 1}", param="prompt")
    return ids
