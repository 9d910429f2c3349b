"""The course's Llama on BPE tokens (given code): a run on a wall-clock budget, and its checkpoint.

    python -m solutions.train.llama_default --preset llama --seconds 1860 --threads 2 --full-val  # out/llama/llama.pt
    python -m solutions.train.llama_default --install out/llama/llama.pt   # -> solutions/assets/llama_default.pt
    python -m solutions.train.llama_default --preset llama --seconds 150 --threads 1 --no-save  # a pilot

The run is part 2's loop (`make_optimizer`, `get_batch` 3.7, `lr_schedule` 3.3, `train_step` 3.8)
with one change: its length is a wall-clock budget, not a step count, so models of different
cost get the same training time. The schedule's position is the fraction of the budget spent
(warmup over the first `warmup_steps / steps` of it, then the cosine to `min_lr`), evaluations
included in the time; the run stops at the first step that ends past the budget. The steps it
took are in the history and the checkpoint's meta.

The checkpoint (`save_llama`) records the decoder family ("llama"), its `LlamaConfig`, the
tokenizer (its asset's name, vocabulary size and SHA-256) and the run's meta; `load_llama`
rebuilds the model from it and refuses a file whose family, config, weights or tokenizer do
not match.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from solutions.fileio import load_checked, save_checked

from .bpe_data import ASSETS, COURSE_BPE, encode_split, evaluate_bpe, load_course_bpe, read_texts, tokenizer_from_dict
from .config import PRESETS, TrainConfig
from .data import get_batch
from .evaluation import LN2
from .llama import Llama, LlamaConfig
from .loop import make_optimizer
from .schedule import lr_schedule
from .step import train_step

LLAMA_DEFAULT = ASSETS / "llama_default.pt"
FAMILY = "llama"


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def train_timed(cfg: TrainConfig, train_ids: torch.Tensor, val_ids: torch.Tensor, val_nbytes: torch.Tensor, *,
                seconds: float, evals: int = 6, progress: bool = True) -> tuple[Llama, dict]:
    """Train `Llama(cfg.model)` for `seconds` of wall time (see the module docstring); (model, history)."""
    torch.manual_seed(cfg.seed)
    model = Llama(cfg.model).train()
    optimizer = make_optimizer(model, cfg)
    data_rng = torch.Generator().manual_seed(cfg.seed)
    hist = {k: [] for k in ("step", "loss", "lr", "time", "val_step", "val_time", "val_loss", "val_bpb")}
    rows = cfg.batch_size * cfg.grad_accum
    next_eval, step, t0 = 1, 0, time.perf_counter()
    while True:
        frac = (time.perf_counter() - t0) / seconds
        if frac >= 1.0:
            break
        lr = lr_schedule(min(int(frac * cfg.steps), cfg.steps - 1), max_lr=cfg.max_lr,
                         warmup_steps=cfg.warmup_steps, total_steps=cfg.steps, min_lr=cfg.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_ids, rows, cfg.block_size, data_rng)
        loss, _ = train_step(model, optimizer, list(zip(x.split(cfg.batch_size), y.split(cfg.batch_size))),
                             max_norm=cfg.max_norm, step=step)
        step += 1
        now = time.perf_counter() - t0
        for k, v in (("step", step), ("loss", loss), ("lr", lr), ("time", now)):
            hist[k].append(v)
        if now >= next_eval * seconds / evals or now >= seconds:
            next_eval += 1
            ev = evaluate_bpe(model, val_ids, val_nbytes, block_size=cfg.block_size,
                              batch_size=cfg.eval_batch_size, max_tokens=cfg.eval_tokens)
            model.train()
            for k, v in (("val_step", step), ("val_time", time.perf_counter() - t0), ("val_loss", ev["loss"]),
                         ("val_bpb", ev["bpb"])):
                hist[k].append(v)
            if progress:
                print(f"step {step} ({time.perf_counter() - t0:.0f} s): train loss {loss:.3f}, "
                      f"val loss {ev['loss']:.3f}, {ev['bpb']:.3f} bits/byte", flush=True)
    hist["train_seconds"] = time.perf_counter() - t0
    return model.eval(), hist


def save_llama(model: Llama, path: str | Path, *, tokenizer_path: str | Path, meta: dict) -> Path:
    """Family, config, fp16 weights (the tied head stored once), tokenizer record and meta, checksummed."""
    tok = json.loads(Path(tokenizer_path).read_text(encoding="utf-8"))
    tied = model.config.tie_embeddings  # a tied lm_head is the embedding: saved once
    sd = {k: v.half() for k, v in model.state_dict().items() if not (k == "lm_head.weight" and tied)}
    return save_checked(path, {"family": FAMILY, "config": asdict(model.config), "state_dict": sd,
                               "tokenizer": {"file": Path(tokenizer_path).name, "vocab_size": tok["vocab_size"],
                                             "sha256": sha256_file(tokenizer_path)},
                               "meta": meta})


def load_llama(path: str | Path = LLAMA_DEFAULT, *, tokenizer_path: str | Path | None = None,
               dtype: torch.dtype = torch.float32):
    """(model in eval mode, tokenizer, meta) from `save_llama`'s file, verified: its checksum, the
    family "llama", a config `LlamaConfig` accepts, a strict state dict, and a tokenizer asset
    (default: the one it names, beside the checkpoint) with the recorded SHA-256 and size."""
    ckpt = load_checked(path, keys=("family", "config", "state_dict", "tokenizer", "meta"), what="Llama checkpoint")
    if ckpt["family"] != FAMILY:
        raise ValueError(f"{path} holds a {ckpt['family']!r} model, not a {FAMILY!r} one")
    cfg = LlamaConfig(**ckpt["config"])
    rec = ckpt["tokenizer"]
    tpath = Path(tokenizer_path) if tokenizer_path is not None else Path(path).with_name(rec["file"])
    if sha256_file(tpath) != rec["sha256"]:
        raise ValueError(f"{tpath} is not the tokenizer {path} was trained with (SHA-256 differs)")
    tok = tokenizer_from_dict(json.loads(tpath.read_text(encoding="utf-8")))
    if tok.vocab_size != cfg.vocab_size or rec["vocab_size"] != cfg.vocab_size:
        raise ValueError(f"{path}: tokenizer of {tok.vocab_size} ids for a model of {cfg.vocab_size}")
    model = Llama(cfg)
    model.load_state_dict({k: v.float() for k, v in ckpt["state_dict"].items()}, strict=True)
    return model.to(dtype).eval(), tok, ckpt["meta"]


PROBE_TOKENS = 256  # a probe is one window: the loss of its targets, recomputed by a test


@torch.no_grad()
def probe(model: Llama, tok, text: str) -> dict:
    """The model's loss on one window of `text` (its first PROBE_TOKENS + 1 ids): nats per target and
    bits per byte of the targets' bytes, for a test that the saved weights reproduce it."""
    ids = tok.encode(text)[: PROBE_TOKENS + 1]
    x, y = torch.tensor([ids[:-1]]), torch.tensor([ids[1:]])
    nats = float(torch.nn.functional.cross_entropy(model(x)[0].float(), y[0], reduction="sum"))
    n_bytes = sum(len(tok.token_bytes[i]) for i in ids[1:] if i not in tok.special_ids.values())
    return {"text": tok.decode(ids), "tokens": len(ids) - 1, "bytes": n_bytes,
            "loss": nats / (len(ids) - 1), "bpb": nats / LN2 / n_bytes}


def install_default(src: str | Path, val_path: str | Path, out: str | Path = LLAMA_DEFAULT) -> Path:
    """Copy a trained checkpoint to the committed default, its meta completed by a probe (one
    window of the val split's first document, scored by the weights as stored)."""
    model, tok, meta = load_llama(src, tokenizer_path=COURSE_BPE)
    meta = dict(meta) | {"probe": probe(model, tok, read_texts(val_path)[0])}
    return save_llama(model, out, tokenizer_path=COURSE_BPE, meta=meta)


def cached_streams(vocab_path: Path, split: Path, cache_dir: Path):
    """encode_split, cached under cache_dir by the vocabulary's hash (encoding 25 MB takes a while)."""
    key = sha256_file(vocab_path)[:16]
    f = cache_dir / f"{split.stem}-{key}.pt"
    if f.is_file():
        d = torch.load(f, weights_only=True)
        return d["ids"], d["nbytes"]
    ids, nbytes = encode_split(split, load_course_bpe(vocab_path))
    cache_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"ids": ids, "nbytes": nbytes}, f)
    return ids, nbytes


def main(argv: list[str] | None = None) -> int:
    from .cli import RUNS_DIR, _rel, corpus_splits

    p = argparse.ArgumentParser(prog="python -m solutions.train.llama_default")
    p.add_argument("--preset", default="llama", choices=sorted(k for k, v in PRESETS.items()
                                                               if isinstance(v.model, LlamaConfig)))
    p.add_argument("--seconds", type=float, help="wall-clock training budget")
    p.add_argument("--install", metavar="CKPT", help=f"no training: copy CKPT (a run's checkpoint) to "
                                                     f"{LLAMA_DEFAULT.name} with its probe")
    p.add_argument("--vocab", default=str(COURSE_BPE), help="the BPE vocabulary JSON")
    p.add_argument("--layers", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--threads", type=int)
    p.add_argument("--data", default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--evals", type=int, default=6, help="evaluations spread over the budget (the last at its end)")
    p.add_argument("--no-save", action="store_true")
    p.add_argument("--full-val", action="store_true", help="after training, evaluate on the whole val split")
    args = p.parse_args(argv)
    if args.install:
        out = install_default(args.install, corpus_splits(args.data)[1])
        print(f"saved {out} ({out.stat().st_size / 1e6:.2f} MB)")
        return 0
    if args.seconds is None or args.seconds <= 0:
        p.error("--seconds must be given, > 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    vocab = Path(args.vocab)
    vsize = json.loads(vocab.read_text(encoding="utf-8"))["vocab_size"]
    cfg = PRESETS[args.preset]
    shape = {k: v for k, v in (("n_layers", args.layers), ("dim", args.dim), ("n_heads", args.heads),
                               ("n_kv_heads", args.kv_heads), ("hidden_dim", args.hidden)) if v is not None}
    cfg = replace(cfg, model=replace(cfg.model, vocab_size=vsize, **shape))
    train_path, val_path = corpus_splits(args.data)
    cache = RUNS_DIR / "bpe_streams"
    train_ids, _ = cached_streams(vocab, train_path, cache)
    val_ids, val_nbytes = cached_streams(vocab, val_path, cache)
    m = cfg.model
    print(f"{args.preset}: Llama {m.n_layers} x {m.dim}, {m.n_heads} heads over {m.n_kv_heads} KV, SwiGLU "
          f"{m.hidden_dim}, vocab {m.vocab_size}; {args.seconds:.0f} s; train {len(train_ids):,} tokens, val "
          f"{len(val_ids):,}; {torch.get_num_threads()} threads", flush=True)
    model, hist = train_timed(cfg, train_ids, val_ids, val_nbytes, seconds=args.seconds, evals=args.evals)
    result = {"shape": asdict(m), "params": model.num_params(), "steps": hist["step"][-1],
              "tokens_seen": hist["step"][-1] * cfg.batch_size * cfg.grad_accum * cfg.block_size,
              "train_seconds": round(hist["train_seconds"], 1), "last_train_loss": hist["loss"][-1],
              "val_loss": hist["val_loss"][-1], "val_bpb": hist["val_bpb"][-1],
              "val_tokens_evaluated": cfg.eval_tokens, "threads": torch.get_num_threads()}
    if args.full_val:
        t = time.perf_counter()
        ev = evaluate_bpe(model, val_ids, val_nbytes, block_size=cfg.block_size, batch_size=cfg.eval_batch_size)
        result["full_val"] = ev | {"seconds": round(time.perf_counter() - t, 1)}
    print("RESULT " + json.dumps(result), flush=True)
    if args.no_save:
        return 0
    out = Path(args.out or RUNS_DIR / args.preset / "llama.pt")
    given = sys.argv[1:] if argv is None else argv
    meta = result | {"command": " ".join(["python -m solutions.train.llama_default", *given]),
                     "config": asdict(cfg), "seed": cfg.seed, "torch": str(torch.__version__),
                     "history": hist, "corpus": {"train": _rel(train_path), "val": _rel(val_path),
                                                 "train_tokens": len(train_ids), "val_tokens": len(val_ids),
                                                 "val_bytes": int(val_nbytes.long().sum())}}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_llama(model, out, tokenizer_path=vocab, meta=meta)
    print(f"saved {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
