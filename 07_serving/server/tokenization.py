# GENERATED from solutions/server/tokenization.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""vLLM's tokenizer endpoints (given code): POST /tokenize and POST /detokenize, answered in the
API process with the served model's tokenizer (no trip to the engine).

    /tokenize    {"prompt": str} or {"messages": [...]} (+ model, add_special_tokens,
                 add_generation_prompt, continue_final_message, return_token_strs)
                 -> {"count", "max_model_len", "tokens", "token_strs"}
    /detokenize  {"tokens": [int, ...]} (+ model) -> {"prompt": str}
    GET /tokenizer_info -> {"tokenizer_class", "eos_token", "bos_token", "pad_token",
                 "chat_template", "model_max_length"} (vLLM's, behind its
                 --enable-tokenizer-info-endpoint; lm-eval's "remote" tokenizer reads it)

A prompt's ids are the ones /v1/completions encodes from that text; messages' ids the ones
/v1/chat/completions renders and encodes: `count` is the `usage.prompt_tokens` either charges.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import ValidationError

from . import protocol as schema
from .protocol import Limits, bad
from .served_model import ServedTokenizer, as_served
from .validation import api_error, check_model

#: Each field's rule, as its `description` states it (for `api_error`'s 400s).
RULES = {
    **{name: f.description for m in (schema.TokenizeCompletionRequest, schema.TokenizeChatRequest,
                                     schema.DetokenizeRequest) for name, f in m.model_fields.items()},
    **{f"messages[].{name}": f.description for name, f in schema.ChatMessage.model_fields.items()},
    "messages[]": "an object with role and content (and optionally a name)",
    "tokens[]": "an integer >= 0 (a token id)",
}


def token_strs(tokenizer: ServedTokenizer, ids: list[int]) -> list[str]:
    """Each id's token string, as Hugging Face's `convert_ids_to_tokens` writes it (what vLLM
    returns): a BPE model's vocabulary strings ("ĠParis", "<|im_end|>"); for the byte
    tokenizer, GPT-2's byte alphabet ("Ġ" is a space) and "<|endoftext|>", as its export
    (hf_export.py) names them."""
    return as_served(tokenizer).token_strs(ids)


Body = TypeVar("Body", schema.TokenizeCompletionRequest, schema.TokenizeChatRequest, schema.DetokenizeRequest)


def _parse(model: type[Body], body: dict, limits: Limits) -> Body:
    """`body` as a `model`: a 400 naming the field (`api_error`), a 404 for a foreign model."""
    try:
        req = model.model_validate(body)
    except ValidationError as e:
        raise api_error([dict(err) for err in e.errors()], RULES) from None
    if req.model is not None:
        check_model(req.model, limits)
    return req


def _chat_text(req: schema.TokenizeChatRequest, tokenizer: ServedTokenizer) -> str:
    """The chat endpoint's rendering of `req.messages` (validation._prompt_ids renders them
    the same way); `continue_final_message` ends the text where the last message's content
    (stripped) ends, as `transformers`' apply_chat_template cuts it."""
    messages = [{"role": m.role, "content": m.text} for m in req.messages]
    if not req.continue_final_message:
        return tokenizer.render_chat(messages, add_generation_prompt=req.add_generation_prompt is not False)
    text, last = tokenizer.render_chat(messages, add_generation_prompt=False), messages[-1]["content"].strip()
    return text[:text.rindex(last) + len(last)]


def tokenize(body: object, limits: Limits, tokenizer: ServedTokenizer) -> dict:
    """The answer to POST /tokenize. `body` holds either `prompt` or `messages` (both: a 400
    naming "messages"; neither: "you must provide a prompt"); a `model` other than null or
    one of limits.models is a 404. Returns {"count": len(tokens), "max_model_len":
    limits.context, "tokens": ids, "token_strs": a list when return_token_strs is true, else
    None}. A prompt longer than the context is counted, not refused (that is how a client
    learns it would not fit). `add_special_tokens` changes nothing: the tokenizer adds no
    BOS (nor does the completions endpoint); special tokens in the text (`<|im_end|>`) are
    one id each. Raises APIError (400 naming the field, 404)."""
    tokenizer = as_served(tokenizer)
    if not isinstance(body, dict):
        raise bad(f"the request body must be a JSON object, got {type(body).__name__}")
    if "messages" in body and "prompt" in body:
        raise bad("give either prompt (a text) or messages (a chat), not both", param="messages")
    if "messages" in body:
        chat = _parse(schema.TokenizeChatRequest, body, limits)
        text, wants_strs, param = _chat_text(chat, tokenizer), chat.return_token_strs, "messages"
    else:
        req = _parse(schema.TokenizeCompletionRequest, body, limits)
        text, wants_strs, param = req.prompt, req.return_token_strs, "prompt"
    ids = tokenizer.encode(text, param=param)
    return {"count": len(ids), "max_model_len": limits.context, "tokens": ids,
            "token_strs": token_strs(tokenizer, ids) if wants_strs else None}


def detokenize(body: object, limits: Limits, tokenizer: ServedTokenizer) -> dict:
    """The answer to POST /detokenize: {"prompt": the text of `tokens`} (an empty list is "";
    the byte model's end-of-text decodes to nothing, a BPE model's special tokens to their
    text as vLLM's /detokenize writes them; bytes that are not valid UTF-8 to U+FFFD, as
    the server's answers decode). An id not below limits.vocab_size is a 400 naming "tokens[i]"
    (vLLM's schema refuses only ids below 0; this server refuses what /v1/completions
    would); a `model` other than null or one of limits.models is a 404."""
    if not isinstance(body, dict):
        raise bad(f"the request body must be a JSON object, got {type(body).__name__}")
    ids = _parse(schema.DetokenizeRequest, body, limits).tokens
    for i, t in enumerate(ids):
        if t >= limits.vocab_size:
            raise bad(f"tokens[{i}] must be a token id in 0..{limits.vocab_size - 1}, got {t}", param=f"tokens[{i}]")
    return {"prompt": as_served(tokenizer).decode(ids)}


#: The answer of each tokenizer endpoint, by path.
ENDPOINTS = {"/tokenize": tokenize, "/detokenize": detokenize}


def tokenizer_info(limits: Limits, tokenizer: ServedTokenizer) -> dict:
    """GET /tokenizer_info: what a client needs to tokenize as the server does (lm-eval's
    remote tokenizer: the eos token's text, then /tokenize and /detokenize). The served
    tokenizers add no BOS and have no pad token; the byte model has no Jinja template."""
    tokenizer = as_served(tokenizer)
    return {"tokenizer_class": type(tokenizer.tokenizer).__name__,
            "eos_token": tokenizer.token_strs([tokenizer.text.eos_id])[0], "bos_token": None, "pad_token": None,
            "chat_template": tokenizer.chat_template, "model_max_length": limits.context}
