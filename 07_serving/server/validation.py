# GENERATED from solutions/server/validation.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 07_serving/07_serving.ipynb. Exercises in this file (line of each hole, then the commands):
#   7.1 Request validation: OpenAI-shaped 4xx errors: line 40; `course check 7.1`, `course hint 7.1`
"""7.1 Request validation: a decoded JSON body -> a GenerationRequest, or an OpenAI-shaped 4xx."""

from __future__ import annotations

from solutions.checks import is_int, is_number
from solutions.tokenizer import ByteTokenizer

from .protocol import CHAT_ROLES, FIELDS, NO_OP, APIError, GenerationRequest, Limits, bad, render_chat


def parse_request(body: object, kind: str, limits: Limits, tokenizer: ByteTokenizer = ByteTokenizer()
                  ) -> GenerationRequest:
    """Validate a decoded JSON body for `kind` ("completion" or "chat"; anything else is a
    ValueError) against `limits`; return the GenerationRequest or raise APIError, whose
    `param` names the field. 404 (code "model_not_found") for a `model` not in
    limits.models; 400 for everything else: a body that is not an object; a field not in
    FIELDS[kind] ("Unrecognized request argument", param = that field); a NO_OP field at a
    value not in its tuple; `user` not a string; `model` missing or not a string;
    `prompt` (completion) not a non-empty string nor a non-empty list of token ids (ints,
    never bools) in 0..vocab_size-1 (a batch of exactly one prompt, `[p]`, is `p`);
    `messages` (chat) not a non-empty list of objects with keys among role, content, name
    (param "messages", "messages[i]", "messages[i].role" or "messages[i].content"), the
    role in CHAT_ROLES, the content a string or a list of {"type": "text", "text": str}
    parts (joined); `n` not an int in 1..max_n; `stop` not a non-empty string nor a list
    of at most max_stop of them; `temperature` not a finite number in [0, 2]; `top_p` not
    one in (0, 1]; `seed` not an int; `stream` not a bool; `stream_options` without
    stream, or not an object with only a bool `include_usage` (param
    "stream_options.include_usage" for that one); the prompt's tokens (chat: of the
    rendered template) leaving no room for one token (param "prompt", code
    "context_length_exceeded"); `max_tokens` (chat: `max_completion_tokens` wins when set,
    and names the param) not an int >= 1, or past the context (code
    "context_length_exceeded"). `null` is the default for every optional field: n 1, no
    stop, temperature 1.0, stream False, max_tokens min(default_max_tokens, what the
    context leaves) for completions and all it leaves for chat. Checked in this order."""
    if kind not in FIELDS:
        raise ValueError(f"kind must be 'completion' or 'chat', got {kind!r}")
    raise NotImplementedError('Exercise 7.1: Request validation: OpenAI-shaped 4xx errors — see 07_serving.ipynb')
