# GENERATED from solutions/server/validation.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 07_serving/07_serving.ipynb. Exercises in this file (line of each hole, then the commands):
#   7.1 The token budget: n and max_tokens against the context: line 33; `course check 7.1`, `course hint 7.1`
"""7.1 Request validation: what a request may cost (token_budget), then the rest of the body."""

from __future__ import annotations

from solutions.checks import is_int, is_number
from solutions.tokenizer import ByteTokenizer

from .protocol import CHAT_ROLES, FIELDS, NO_OP, APIError, GenerationRequest, Limits, bad, render_chat


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


def parse_request(body: object, kind: str, limits: Limits, tokenizer: ByteTokenizer = ByteTokenizer()
                  ) -> GenerationRequest:
    """Validate a decoded JSON body for `kind` ("completion" or "chat"; anything else is a
    ValueError) against `limits` (given code, but for `token_budget`); return the
    GenerationRequest or raise APIError, whose `param` names the field. 404 (code
    "model_not_found") for a `model` not in limits.models; 400 for everything else, checked
    in this order: a body that is not an object; a field not in FIELDS[kind]
    ("Unrecognized request argument", param = that field); a NO_OP field at a value not in
    its tuple; `user` not a string; `model` missing or not a string; `prompt` (completion)
    not a non-empty string nor a non-empty list of token ids (ints, never bools) in
    0..vocab_size-1, nor a list of 1..max_prompts of those (a batch: `prompts`, in order;
    a batch of exactly one prompt, `[p]`, is `p`); `messages` (chat) not a
    non-empty list of objects with keys among role, content, name (param "messages",
    "messages[i]", "messages[i].role" or "messages[i].content"), the role in CHAT_ROLES,
    the content a string or a list of {"type": "text", "text": str} parts (joined); `stop`
    not a non-empty string nor a list of at most max_stop of them; `temperature` not a
    finite number in [0, 2]; `top_p` not one in (0, 1]; `seed` not an int; `stream` not a
    bool; `stream_options` without stream, or not an object with only a bool
    `include_usage` (param "stream_options.include_usage" for that one); vLLM's extras:
    `repetition_penalty` not a finite number > 0 (1 = off), `ignore_eos` not a bool,
    `min_tokens` not an int >= 0; then `token_budget` (n, the prompt's length against the
    context, max_tokens) on the prompt's tokens (chat: of the rendered template; a batch:
    of its longest prompt, so every prompt gets the same max_tokens); then `min_tokens`
    over max_tokens. `null` is the default for every optional field: no stop,
    temperature 1.0, stream False, repetition_penalty 1.0, ignore_eos False, min_tokens 0."""
    if kind not in FIELDS:
        raise ValueError(f"kind must be 'completion' or 'chat', got {kind!r}")
    if not isinstance(body, dict):
        raise bad(f"the request body must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - FIELDS[kind])
    if unknown:
        raise bad(f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])
    for name, ok in NO_OP.items():
        if body.get(name) is not None and body[name] not in ok:
            raise bad(f"{name}={body[name]!r} is not supported by this server (only {ok[0]!r})", param=name)
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise bad("user must be a string", param="user")

    model = body.get("model")
    if model is None:
        raise bad("you must provide a model parameter", param="model")
    if not isinstance(model, str):
        raise bad(f"model must be a string, got {type(model).__name__}", param="model")
    if model not in limits.models:
        raise APIError(404, f"The model `{model}` does not exist; this server has {list(limits.models)}",
                       param="model", code="model_not_found")

    batch = _prompt_ids(body, kind, limits, tokenizer)

    stop = body.get("stop")
    stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or len(stop) > limits.max_stop or not all(isinstance(s, str) and s for s in stop):
        raise bad(f"stop must be a non-empty string or a list of at most {limits.max_stop} of them", param="stop")

    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else temperature
    if not is_number(temperature) or not 0 <= temperature <= 2:
        raise bad(f"temperature must be a number in [0, 2], got {temperature!r}", param="temperature")
    top_p = body.get("top_p")
    if top_p is not None and (not is_number(top_p) or not 0 < top_p <= 1):
        raise bad(f"top_p must be a number in (0, 1], got {top_p!r}", param="top_p")
    seed = body.get("seed")
    if seed is not None and not is_int(seed):
        raise bad(f"seed must be an integer, got {seed!r}", param="seed")

    stream = body.get("stream")
    stream = False if stream is None else stream
    if not isinstance(stream, bool):
        raise bad(f"stream must be a boolean, got {stream!r}", param="stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise bad("stream_options are only allowed when stream is true", param="stream_options")
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise bad("stream_options must be an object with only include_usage", param="stream_options")
        include_usage = options.get("include_usage", False)
        if not isinstance(include_usage, bool):
            raise bad("stream_options.include_usage must be a boolean", param="stream_options.include_usage")

    penalty = body.get("repetition_penalty")
    penalty = 1.0 if penalty is None else penalty
    if not is_number(penalty) or not penalty > 0:
        raise bad(f"repetition_penalty must be a number > 0 (1 = off), got {penalty!r}",
                  param="repetition_penalty")
    ignore_eos = body.get("ignore_eos")
    ignore_eos = False if ignore_eos is None else ignore_eos
    if not isinstance(ignore_eos, bool):
        raise bad(f"ignore_eos must be a boolean, got {ignore_eos!r}", param="ignore_eos")
    min_tokens = body.get("min_tokens")
    min_tokens = 0 if min_tokens is None else min_tokens
    if not is_int(min_tokens) or min_tokens < 0:
        raise bad(f"min_tokens must be an integer >= 0, got {min_tokens!r}", param="min_tokens")

    # the longest prompt decides: every prompt of a batch gets the same max_tokens
    max_tokens, n = token_budget(body, kind, max(len(p) for p in batch), limits)
    if min_tokens > max_tokens:
        raise bad(f"min_tokens={min_tokens} must not exceed max_tokens={max_tokens}", param="min_tokens")
    ids = tuple(batch[0])
    return GenerationRequest(kind, model, ids, max_tokens, n, tuple(stop), float(temperature),
                             None if top_p is None or top_p == 1 else float(top_p),
                             None if seed is None else int(seed), stream, include_usage,
                             float(penalty), ignore_eos, int(min_tokens),
                             tuple(tuple(p) for p in batch) if len(batch) > 1 else ())


def _prompt_ids(body: dict, kind: str, limits: Limits, tokenizer: ByteTokenizer) -> list[list[int]]:
    """The prompts' token ids, one list per prompt: a completion's `prompt` (a string, a
    list of token ids, or a list of either: a batch), or a chat's messages rendered by the
    chat template (one prompt); a 400 naming the field when it is malformed."""
    if kind == "completion":
        prompt = body.get("prompt")
        if prompt is None:
            raise bad("you must provide a prompt", param="prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            if len(prompt) > limits.max_prompts:
                raise bad(f"a request may hold at most {limits.max_prompts} prompts, got {len(prompt)}",
                          param="prompt")
            return [_one_prompt(p, f"prompt[{i}]", limits, tokenizer) for i, p in enumerate(prompt)]
        return [_one_prompt(prompt, "prompt", limits, tokenizer)]
    messages = body.get("messages")
    if messages is None:
        raise bad("you must provide messages", param="messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages must be a non-empty list", param="messages")
    clean = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or set(m) - {"role", "content", "name"}:
            raise bad(f"{where} must be an object with role and content", param=where)
        if m.get("role") not in CHAT_ROLES:
            raise bad(f"{where}.role must be one of {list(CHAT_ROLES)}, got {m.get('role')!r}",
                      param=f"{where}.role")
        content = m.get("content")
        if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                             and isinstance(p.get("text"), str) for p in content):
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise bad(f"{where}.content must be a string or a list of text parts", param=f"{where}.content")
        clean.append({"role": m["role"], "content": content})
    return [tokenizer.encode(render_chat(clean))]


def _one_prompt(prompt: object, where: str, limits: Limits, tokenizer: ByteTokenizer) -> list[int]:
    """One completion prompt (a non-empty string or list of token ids) as token ids; a 400
    with param "prompt" (the message says which one: `where`) otherwise."""
    if isinstance(prompt, str):
        if not prompt:
            raise bad(f"{where} must not be empty", param="prompt")
        return tokenizer.encode(prompt)
    if isinstance(prompt, list) and prompt and all(is_int(t) for t in prompt):
        if not all(0 <= t < limits.vocab_size for t in prompt):
            raise bad(f"{where}: token ids must be in 0..{limits.vocab_size - 1}", param="prompt")
        return [int(t) for t in prompt]
    raise bad(f"{where} must be a non-empty string or a non-empty list of token ids (or, for prompt, a list "
              f"of those: a batch)", param="prompt")
