# GENERATED from solutions/server/hf_export.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""The course's model as a Hugging Face folder that `transformers` and vLLM load (given code).

    python -m solutions.server.hf_export OUT_DIR [--model default|PATH]

`export(out_dir, model)` writes, and then checks by loading it back with `transformers`:

- `config.json`, `model.safetensors`, `generation_config.json`: a `GPT2LMHeadModel` with
  exactly the course model's weights (`GPT.to_hf`), float32; end-of-text 256 is BOS/EOS;
- `tokenizer.json` (built with `tokenizers`) + `tokenizer_config.json`: a tokenizer whose ids
  are the raw UTF-8 bytes 0..255 and 256 = `<|endoftext|>` (`solutions.tokenizer.EOT`, the
  EOS), so every text encodes to `ByteTokenizer`'s ids (a literal "<|endoftext|>" in a text
  is bytes, as in the course: `split_special_tokens`); the `chat_template` renders exactly
  as the course server's `render_chat` (it always ends with the assistant cue, as the
  course does, whatever `add_generation_prompt` says).

The check (`verify`): the loaded tokenizer encodes ASCII, multi-byte UTF-8, emoji, newlines
and a rendered chat to ByteTokenizer's ids and decodes them back; its chat template gives
`render_chat`'s text; the loaded model's logits equal the course model's (atol and rtol 1e-5). A
failed check raises `ExportError` and publishes nothing. Never loses data: the folder is
written next to OUT_DIR as `.partial-*` and renamed into place when checked; an OUT_DIR that
exists and is not empty, or lies in the course's packages, is refused before writing.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from solutions.checks import ArgumentParser
from solutions.dedup.byte_unicode import byte_chars
from solutions.fileio import UnsafeOutputError, check_outputs, staged_outputs
from solutions.gpt import GPT, load_checkpoint, load_default
from solutions.tokenizer import EOT, VOCAB_SIZE, ByteTokenizer

from .protocol import render_chat as server_render_chat

EOT_TEXT = "<|endoftext|>"
FILES = ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
#: `protocol.render_chat` in Jinja (the format `transformers` and vLLM read)
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + '\\n' }}"
                 "{% endfor %}{{ '<|assistant|>\\n' }}")
SAMPLES = ("hello, world", "def f(x):\n    return x + 1\n\n", "héllo wörld ¿qué? 日本語", "emoji 😀🐍 ✓",
           "\n\n\t \r\n", "a literal <|endoftext|> stays bytes", "")
CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hé 😀\nplease"},
        {"role": "assistant", "content": "ok"}, {"role": "user", "content": ""}]


class ExportError(RuntimeError):
    """The exported folder does not load back as the course's model and tokenizer."""


def byte_tokenizer_json():
    """A `tokenizers.Tokenizer`: ids 0..255 = the UTF-8 bytes (GPT-2's byte-to-character
    alphabet, no merges), 256 = `<|endoftext|>` (special)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    chars = dict(enumerate(byte_chars()))  # GPT-2's bytes_to_unicode (stage 02's byte alphabet)
    tok = Tokenizer(models.BPE(vocab={c: b for b, c in chars.items()}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(EOT_TEXT, special=True, normalized=False)])
    if tok.token_to_id(EOT_TEXT) != EOT:
        raise ExportError(f"{EOT_TEXT} got id {tok.token_to_id(EOT_TEXT)}, not {EOT}")
    return tok


def tokenizer_config(context: int) -> dict:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": context, "eos_token": EOT_TEXT,
            "bos_token": EOT_TEXT, "pad_token": EOT_TEXT, "split_special_tokens": True,
            "clean_up_tokenization_spaces": False, "add_bos_token": False, "add_eos_token": False,
            "chat_template": CHAT_TEMPLATE}


def export(out_dir: str | Path, model: GPT, *, inputs: tuple = (), render_chat=None) -> Path:
    """Write `model` (a course GPT over the byte vocabulary) as a Hugging Face folder at
    `out_dir`, checked by `verify` (with `render_chat`) before it is renamed into place;
    return the path. `inputs`: files the run reads (never overwritten).
    Raises `UnsafeOutputError` (a ValueError) for an `out_dir` that exists and is not an empty
    folder or lies in the course's packages, ValueError for a model whose vocabulary is not
    the course's or not float32 on the CPU, `ExportError` if the written folder fails the check."""
    out = Path(out_dir)
    if not isinstance(model, GPT) or model.config.vocab_size != VOCAB_SIZE:
        raise ValueError(f"model must be a course GPT with vocab_size {VOCAB_SIZE}, got {type(model).__name__}")
    w = model.transformer.wte.weight
    if w.dtype != torch.float32 or w.device.type != "cpu":
        raise ValueError(f"model must be float32 on the CPU (load it so), got {w.dtype} on {w.device}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is a file, not a folder" if not out.is_dir() else "exists and is not empty"
        raise UnsafeOutputError(f"the output folder {out} {what}; refusing to overwrite it "
                                "(choose a new or empty folder)")
    check_outputs(files=[out / n for n in FILES], folder=out, inputs=inputs, what="export")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with staged_outputs(out, FILES) as work:
        hf = model.to_hf()
        hf.generation_config.bos_token_id = hf.generation_config.eos_token_id = EOT
        hf.save_pretrained(work, safe_serialization=True)
        byte_tokenizer_json().save(str(work / "tokenizer.json"))
        (work / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(model.config.block_size), indent=1))
        for extra in set(p.name for p in work.iterdir()) - set(FILES):
            raise ExportError(f"transformers wrote an unexpected file {extra}")
        for name in FILES:
            (work / name).chmod(0o644)
        verify(work, model, render_chat)
    return out


def verify(folder: str | Path, model: GPT, render_chat=None) -> None:
    """Load `folder` with `transformers` and raise `ExportError` unless it encodes, decodes,
    renders chats and computes logits as the course's tokenizer, server and `model` do.
    `render_chat`: the server's chat rendering to match (default: this package's
    `protocol.render_chat`)."""
    from transformers import AutoTokenizer, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    render_chat = render_chat or server_render_chat  # the server's template, the one to match

    hf_logging.disable_progress_bar()
    tok, course = AutoTokenizer.from_pretrained(str(folder)), ByteTokenizer()
    chat = render_chat(CHAT)
    for text in (*SAMPLES, chat):
        ids = tok(text, add_special_tokens=True)["input_ids"]
        if ids != course.encode(text) or tok.decode(ids) != text:
            raise ExportError(f"the tokenizer encodes {text!r} as {ids[:12]}..., the course as "
                              f"{course.encode(text)[:12]}... (or decodes it back differently)")
    if tok.eos_token_id != EOT or tok.decode([104, EOT], skip_special_tokens=True) != "h":
        raise ExportError(f"the tokenizer's end-of-text is {tok.eos_token_id}, not {EOT}")
    rendered = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    if rendered != chat:
        raise ExportError(f"the chat template renders {rendered!r}, the course server {chat!r}")
    hf = GPT2LMHeadModel.from_pretrained(str(folder)).eval()
    idx = torch.tensor([course.encode(SAMPLES[1] + chat)[: model.config.block_size]])
    with torch.no_grad():
        theirs, ours = hf(idx).logits, model(idx)
    if not torch.allclose(theirs, ours, rtol=1e-5, atol=1e-5):
        raise ExportError(f"the exported model's logits differ from the course model's by up to "
                          f"{(theirs - ours).abs().max().item():.3g} (tolerance 1e-5 + 1e-5 * |logit|)")


def main(argv: list[str] | None = None) -> None:
    p = ArgumentParser(prog="python -m solutions.server.hf_export", description=__doc__.split("\n")[0])
    p.add_argument("out_dir", help="a new (or empty) folder to write")
    p.add_argument("--model", default="default", help="'default' (the committed model) or a checkpoint file")
    args = p.parse_args(argv)
    try:
        if args.model == "default":
            model, inputs = load_default()[0], ()
        else:
            model, inputs = load_checkpoint(args.model)[0], (args.model,)
        out = export(args.out_dir, model, inputs=inputs)
    except (ValueError, FileNotFoundError, ExportError) as e:
        p.exit(2, f"error: {e}\n")
    print(f"wrote {out}: {', '.join(FILES)} (checked against the course model, tokenizer and chat template)")


if __name__ == "__main__":
    main()
