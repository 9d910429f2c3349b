# GENERATED from solutions/train/bpe_data.py by `course stubs --write`.
# Nothing to write here: given code of stage 03 (03_training_loop/03_training_loop.ipynb).
"""The course's BPE vocabulary and BPE token streams for training (given code).

The course vocabulary is stage 02's `train_bpe` run on stage 02's TRAIN split only (val and
test never shape it), with one special token, `<|endoftext|>` (id 0), between documents, and
GPT-2's pre-tokenizer. It is stored as a small JSON asset (`solutions/assets/course_bpe.json`:
tokens, merges, how it was built) and rebuilt, deterministically, by

    python -m solutions.train.bpe_data --vocab-size 2048        # writes the asset

A split becomes one stream of ids (each document's ids, then `<|endoftext|>`), and beside it
the number of UTF-8 bytes each id spells (0 for `<|endoftext|>`). Bits per byte over BPE
targets is then the summed target loss in bits over the bytes those targets decode to:
`evaluate_bpe` takes exercise 3.9's `evaluate` as it is (its "loss" is nats per target) and
divides by the bytes of exactly the targets `evaluate` scored, so a byte stream and a BPE
stream of the same text are compared on the same held-out bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from solutions.dedup.bpe import ByteLevelBPE  # stage 02's tokenizer and trainer (2.11-2.13)
from solutions.dedup.bpe_train import train_bpe
from solutions.gpt import ASSETS

from .evaluation import LN2, _whole_windows, evaluate

COURSE_BPE = ASSETS / "course_bpe.json"
EOT_TOKEN = "<|endoftext|>"
PRETOKENIZER = "gpt2"


def read_texts(path: str | Path) -> list[str]:
    """The "text" of every record of a JSONL split, in file order."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def build_course_bpe(train_path: str | Path, vocab_size: int) -> dict:
    """The course vocabulary as a JSON-able dict: `train_bpe` on the documents of the train split."""
    texts = read_texts(train_path)
    result = train_bpe(texts, vocab_size, [EOT_TOKEN], pretokenizer=PRETOKENIZER)
    return {"format": "course-bpe-1", "vocab_size": len(result.tokens), "special_tokens": [EOT_TOKEN],
            "pretokenizer": PRETOKENIZER, "tokens": result.tokens, "merges": [list(m) for m in result.merges],
            "trained_on": {"file": Path(train_path).name, "documents": len(texts),
                           "bytes": sum(len(t.encode("utf-8")) for t in texts)},
            "command": f"python -m solutions.train.bpe_data --vocab-size {vocab_size}"}


def tokenizer_from_dict(d: dict) -> ByteLevelBPE:
    """A `ByteLevelBPE` from a dict written by `build_course_bpe` (ValueError if it is not one)."""
    if not isinstance(d, dict) or d.get("format") != "course-bpe-1":
        raise ValueError("not a course BPE vocabulary (format 'course-bpe-1')")
    tok = ByteLevelBPE(d["tokens"], [tuple(m) for m in d["merges"]], d["special_tokens"], d["pretokenizer"])
    if tok.vocab_size != d["vocab_size"] or tok.special_ids.get(EOT_TOKEN) != 0:
        raise ValueError(f"course BPE vocabulary is inconsistent: {tok.vocab_size} tokens, "
                         f"vocab_size {d['vocab_size']}, {EOT_TOKEN} id {tok.special_ids.get(EOT_TOKEN)}")
    return tok


def load_course_bpe(path: str | Path = COURSE_BPE) -> ByteLevelBPE:
    """The course's BPE tokenizer from its JSON asset."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no course BPE vocabulary at {path}; build it with "
                                "python -m solutions.train.bpe_data --vocab-size 2048")
    return tokenizer_from_dict(json.loads(path.read_text(encoding="utf-8")))


def encode_split(path: str | Path, tok: ByteLevelBPE) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, nbytes) of a JSONL split: each document's ids followed by `<|endoftext|>`, all
    concatenated, int16 (int32 above 32,767 ids); nbytes[i] = the UTF-8 bytes id i spells (uint8)."""
    eot = tok.special_ids[EOT_TOKEN]
    ids: list[int] = []
    for text in read_texts(path):
        ids += tok.encode(text)
        ids.append(eot)
    dtype = np.int16 if tok.vocab_size <= 32767 else np.int32
    arr = np.asarray(ids, dtype=dtype)
    lengths = np.array([0 if i in tok.special_ids.values() else len(b) for i, b in enumerate(tok.token_bytes)],
                       dtype=np.uint8)
    return torch.from_numpy(arr), torch.from_numpy(lengths[arr.astype(np.int64)])


def evaluate_bpe(model: nn.Module, tokens: torch.Tensor, nbytes: torch.Tensor, *, block_size: int,
                 batch_size: int = 16, max_tokens: int | None = None) -> dict[str, float]:
    """`evaluate` (3.9) on a BPE stream, with bits per byte counted over the bytes the targets spell.

    Returns {"loss" (nats per target), "tokens" (targets), "bytes" (UTF-8 bytes of those
    targets), "bpb" (summed target loss in bits / "bytes")}. The targets are evaluate's:
    tokens[1 : n*T + 1] for its n windows of T.
    """
    if len(nbytes) != len(tokens):
        raise ValueError(f"nbytes ({len(nbytes)}) must give one count per token ({len(tokens)})")
    n = _whole_windows(tokens, block_size, max_tokens)
    ev = evaluate(model, tokens, block_size=block_size, batch_size=batch_size, max_tokens=n * block_size)
    n_bytes = int(nbytes[1 : n * block_size + 1].long().sum())
    return {"loss": ev["loss"], "tokens": ev["tokens"], "bytes": n_bytes,
            "bpb": ev["loss"] * ev["tokens"] / LN2 / max(n_bytes, 1)}


def bytes_per_token(paths: list[Path], tokenizers: dict[str, ByteLevelBPE]) -> list[dict]:
    """UTF-8 bytes per token of each tokenizer on the documents of the JSONL files `paths`,
    one row per kind of document: "code" (ids `py:...`) and "prose" (every other id), each
    {"text", "documents", "bytes", name: bytes per token for each tokenizer}."""
    docs: dict[str, list[str]] = {"code": [], "prose": []}
    for path in paths:
        with Path(path).open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    docs["code" if r["id"].startswith("py:") else "prose"].append(r["text"])
    rows = []
    for kind, texts in docs.items():
        n_bytes = sum(len(t.encode("utf-8")) for t in texts)
        row: dict = {"text": kind, "documents": len(texts), "bytes": n_bytes}
        for name, tok in tokenizers.items():
            row[name] = n_bytes / max(1, sum(len(tok.encode(t)) for t in texts))
        rows.append(row)
    return rows


def print_bytes_per_token(data: str | None, vocab: str | Path) -> None:
    """The README's table: bytes per token of the course vocabulary `vocab` and of SmolLM2's
    on the val and test splits, which never shape the course vocabulary."""
    from solutions.dedup.smollm2 import gguf_tokenizer

    from .cli import corpus_splits

    _, val_path = corpus_splits(data)
    ours, smol = load_course_bpe(vocab), gguf_tokenizer()
    names = {f"course BPE ({ours.vocab_size:,})": ours, f"SmolLM2 ({smol.vocab_size:,})": smol}
    rows = bytes_per_token([val_path, val_path.with_name("test.jsonl")], names)
    print(f"bytes per token on the val and test splits ({Path(vocab).name} was trained on the train split)\n")
    print("| text | documents | bytes | bytes (256) | " + " | ".join(names) + " |")
    print("| --- | ---: | ---: | ---: |" + " ---: |" * len(names))
    for r in rows:
        print(f"| {r['text']} | {r['documents']} | {r['bytes']:,} | 1.00 | "
              + " | ".join(f"{r[n]:.2f}" for n in names) + " |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m solutions.train.bpe_data",
                                description="Train the course's BPE vocabulary on stage 02's train split.")
    p.add_argument("--vocab-size", type=int, default=2048)
    p.add_argument("--data", default=None, help="folder with train.jsonl (default: stage 02's data/corpus)")
    p.add_argument("--out", default=str(COURSE_BPE))
    p.add_argument("--bytes-per-token", metavar="VOCAB", nargs="?", const=str(COURSE_BPE), default=None,
                   help="no training: print bytes per token of VOCAB (default: the course's) and of "
                        "SmolLM2's vocabulary on the val and test splits")
    args = p.parse_args(argv)
    if args.bytes_per_token is not None:
        print_bytes_per_token(args.data, args.bytes_per_token)
        return 0
    from .cli import corpus_splits

    train_path, _ = corpus_splits(args.data)
    d = build_course_bpe(train_path, args.vocab_size)
    from solutions.fileio import write_text_atomic

    write_text_atomic(args.out, json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {args.out}: {d['vocab_size']} tokens, {len(d['merges'])} merges, "
          f"from {d['trained_on']['documents']} documents ({d['trained_on']['bytes']:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
