"""Given: a Llama read from a GGUF file as a Hugging Face folder: safetensors, config.json,
tokenizer (nothing to write here).

    python -m solutions.kv_cache.export_hf OUT_DIR [--gguf PATH]      (default: SmolLM2's file)

`export_llama(out_dir, model, tokenizer, gguf)` writes, then checks by loading it back with
`transformers` (so vLLM, which reads the same files, loads it too):

- `model.safetensors` + `config.json` + `generation_config.json`: a `LlamaForCausalLM` with
  exactly the model's weights (stage 03's `Llama.to_hf`, float32; the tied head stored once);
- `tokenizer.json` + `tokenizer_config.json`: the tokenizer `transformers` builds from the same
  GGUF metadata (its own GGUF converter, `convert_gguf_tokenizer`) with SmolLM2's own
  pre-tokenizer put back (`hf_tokenizer_backend`), the special tokens and the file's chat
  template.

The check (`verify_export`): the loaded tokenizer gives the course tokenizer's ids on a few
texts (code, emoji, CJK, spaces before digits, a ChatML conversation) and renders chats as `render_chat` does; the
loaded model's logits equal the course model's (atol 1e-5, rtol 1e-5). A failed check raises
`ExportError` and publishes nothing: the folder is written beside OUT_DIR as `.partial-*` and
renamed into place when checked (`solutions.fileio.staged_outputs`); an OUT_DIR that exists
and is not empty, or lies in the course's packages, is refused before anything is written.
(The course's old GPT-2 model has its own exporter, stage 07's `solutions/server/hf_export.py`.)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from solutions.checks import ArgumentParser
from solutions.fileio import UnsafeOutputError, check_outputs, staged_outputs
from solutions.train import Llama

from .gguf_reader import GGUFFile, read_gguf
from .smollm2 import gguf_tokenizer, llama_from_gguf, render_chat, smollm2_path

FILES = ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
SAMPLES = ("def square(x):\n    return x ** 2\n", "The capital of France is Paris.", "héllo 日本語 😀🐍 \t\n  ",
           "12345 + 67 = 12412", "x  1\n    2024", "a <|im_start|> inside text")
CHAT = [{"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "And of Italy?"}]


class ExportError(RuntimeError):
    """The exported folder does not load back as the course's model and tokenizer."""


def hf_tokenizer_backend(gguf: GGUFFile):
    """The `tokenizers.Tokenizer` that `transformers` builds from this GGUF file's metadata
    (its GGUF converter, fed from `read_gguf`'s metadata instead of its own slower reader),
    with SmolLM2's own pre-tokenizer where the file names it (`tokenizer.ggml.pre` "smollm":
    single digits, then GPT-2's byte-level split, as SmolLM2's tokenizer.json has it and stage
    02's ByteLevelBPE does; transformers' converter knows no "smollm" and keeps GPT-2's alone,
    which joins a space to the digit after it)."""
    from tokenizers import pre_tokenizers
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

    meta = gguf.metadata
    tok = {name: meta[f"tokenizer.{key}"] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
           if f"tokenizer.{key}" in meta}
    backend, _ = convert_gguf_tokenizer(meta["general.architecture"], tok)
    if meta.get("tokenizer.ggml.pre") == "smollm":
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return backend


def tokenizer_config(gguf: GGUFFile, context: int) -> dict:
    meta, tokens = gguf.metadata, gguf.metadata["tokenizer.ggml.tokens"]

    def token(key: str):
        i = meta.get(f"tokenizer.ggml.{key}")
        return tokens[i] if i is not None else None

    return {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": context,
            "bos_token": token("bos_token_id"), "eos_token": token("eos_token_id"),
            "unk_token": token("unknown_token_id"), "pad_token": token("padding_token_id"),
            "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
            "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
            "clean_up_tokenization_spaces": False, "chat_template": meta.get("tokenizer.chat_template")}


def export_llama(out_dir: str | Path, model: Llama, tokenizer, gguf: GGUFFile) -> Path:
    """Write `model` (stage 03's Llama, float32 on the CPU) and the tokenizer of `gguf` (the file
    both came from) as a Hugging Face folder at `out_dir`, checked by `verify_export` against
    `model` and `tokenizer` (the course's) before it is renamed into place; return the path.
    Raises `UnsafeOutputError` (a ValueError) for an `out_dir` that exists and is not an empty
    folder or lies in the course's packages, ValueError for a model that is not a float32 CPU
    Llama, `ExportError` if the written folder fails the check."""
    out = Path(out_dir)
    if not isinstance(model, Llama):
        raise ValueError(f"model must be a solutions.train.Llama, got {type(model).__name__}")
    w = model.model.embed_tokens.weight
    if w.dtype != torch.float32 or w.device.type != "cpu":
        raise ValueError(f"model must be float32 on the CPU (load it so), got {w.dtype} on {w.device}")
    check_out_dir(out, (gguf.path,))
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with staged_outputs(out, FILES) as work:
        hf = model.to_hf()
        meta = gguf.metadata
        for key, attr in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                          ("padding_token_id", "pad_token_id")):
            if f"tokenizer.ggml.{key}" in meta:
                setattr(hf.config, attr, meta[f"tokenizer.ggml.{key}"])
                setattr(hf.generation_config, attr, meta[f"tokenizer.ggml.{key}"])
        hf.save_pretrained(work, safe_serialization=True)
        hf_tokenizer_backend(gguf).save(str(work / "tokenizer.json"))
        (work / "tokenizer_config.json").write_text(
            json.dumps(tokenizer_config(gguf, model.config.max_seq_len), indent=1), encoding="utf-8")
        for extra in set(p.name for p in work.iterdir()) - set(FILES):
            raise ExportError(f"transformers wrote an unexpected file {extra}")
        for name in FILES:
            (work / name).chmod(0o644)
        verify_export(work, model, tokenizer, gguf)
    return out


def check_out_dir(out: Path, inputs: tuple = ()) -> None:
    """Refuse (`UnsafeOutputError`) an export folder that exists and is not empty, is a file, or
    lies in the course's packages, before anything is loaded or written."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is a file, not a folder" if not out.is_dir() else "exists and is not empty"
        raise UnsafeOutputError(f"the output folder {out} {what}; refusing to overwrite it "
                                "(choose a new or empty folder)")
    check_outputs(files=[out / n for n in FILES], folder=out, inputs=inputs, what="export")


def verify_export(folder: str | Path, model: Llama, tokenizer, gguf: GGUFFile) -> None:
    """Load `folder` with `transformers`; raise `ExportError` unless its tokenizer encodes
    `SAMPLES` and a rendered chat to `tokenizer`'s ids, renders `CHAT` as `render_chat`, and
    its model's logits equal `model`'s (atol and rtol 1e-5) on them."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(folder))
    chat = render_chat(CHAT, gguf)
    for text in (*SAMPLES, chat):
        ids, ours = tok(text, add_special_tokens=True)["input_ids"], tokenizer.encode(text)
        if ids != ours:
            raise ExportError(f"the exported tokenizer encodes {text!r} as {ids[:12]}..., the course's "
                              f"as {ours[:12]}...")
    rendered = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    if rendered != chat:
        raise ExportError(f"the exported chat template renders {rendered!r}, render_chat {chat!r}")
    hf = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    idx = torch.tensor([tokenizer.encode(SAMPLES[0] + chat)])
    with torch.no_grad():
        theirs, ours = hf(idx).logits, model(idx)
    if not torch.allclose(theirs, ours, rtol=1e-5, atol=1e-5):
        raise ExportError(f"the exported model's logits differ from the course model's by up to "
                          f"{(theirs - ours).abs().max().item():.3g} (tolerance 1e-5 + 1e-5 * |logit|)")


def main(argv: list[str] | None = None) -> None:
    p = ArgumentParser(prog="python -m solutions.kv_cache.export_hf", description=__doc__.split("\n")[0])
    p.add_argument("out_dir", help="a new (or empty) folder to write")
    p.add_argument("--gguf", default=None, help="a Llama GGUF file (default: SmolLM2's, from the installed wheel)")
    args = p.parse_args(argv)
    try:
        path = Path(args.gguf) if args.gguf else smollm2_path()
        check_out_dir(Path(args.out_dir), (path,))  # before the minutes of loading
        gguf = read_gguf(path)
        out = export_llama(args.out_dir, llama_from_gguf(gguf), gguf_tokenizer(gguf), gguf)
    except (ValueError, FileNotFoundError, ExportError) as e:
        p.exit(2, f"error: {e}\n")
    print(f"wrote {out}: {', '.join(FILES)} (checked against the course's model, tokenizer and chat template)")


if __name__ == "__main__":
    main()
