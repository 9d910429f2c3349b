"""The command line (given): `python -m solutions.train --preset default`, and its data."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.distributed as dist

from solutions.checks import ArgumentParser
from solutions.fileio import atomic_write, check_outputs, load_checked, write_text_atomic
from solutions.gpt import DEFAULT_WEIGHTS, GPTConfig, save_checkpoint

from .checkpoint import TRAINING_STATE_KEYS
from .config import PRESETS, TrainConfig
from .data import load_tokens
from .distributed import setup_distributed
from .loop import train
from .plot import plot_history
from .sampling import sample_gpt

REPO = Path(__file__).resolve().parents[2]
CORPUS_DIR = REPO / "data" / "corpus"  # where stage 02 writes the splits (not committed)
RUNS_DIR = REPO / "out"  # where a run writes what it is not told to write elsewhere (not committed)


def corpus_splits(data_dir: str | Path | None) -> tuple[Path, Path]:
    """(train.jsonl, val.jsonl): from `data_dir`, or stage 02's pipeline (built once, cached)."""
    if data_dir is None:
        from solutions.dedup import build_train_split  # stage 02, only when its corpus is needed

        train_path = Path(build_train_split(CORPUS_DIR))
    else:
        if Path(data_dir).is_file():
            raise ValueError(f"data_dir {data_dir} is a file; give the folder that holds train.jsonl and val.jsonl")
        train_path = Path(data_dir) / "train.jsonl"
    val_path = train_path.with_name("val.jsonl")
    for p in (train_path, val_path):
        if not p.is_file():
            raise FileNotFoundError(f"no split at {p}; a data directory holds train.jsonl and val.jsonl")
    return train_path, val_path


def describe_split(path: Path, tokens: torch.Tensor) -> dict:
    """Documents and tokens of one split, and documents by kind of source, for the meta.

    The kind of a source is its prefix before ':' ("pydoc_data.topics:if" -> "pydoc_data.topics"),
    else its file suffix ("asyncio/tasks.py" -> "*.py").
    """
    kinds: dict[str, int] = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                source = str(json.loads(line).get("source", "?"))
                kind = source.split(":", 1)[0] if ":" in source else f"*{Path(source).suffix}"
                kinds[kind] = kinds.get(kind, 0) + 1
    return {"file": str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path),
            "documents": sum(kinds.values()), "tokens": len(tokens), "documents_by_kind": kinds}


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main(argv: list[str] | None = None) -> int:
    """`python -m solutions.train [options]`; exit 0, or 2 with `error: ...` for a bad argument.

    Writes the model to `--out` (default: out/<preset>/gpt.pt, a git-ignored run folder);
    the committed default model is replaced only with `--replace-default-model`. Every
    output is checked before training (not an input, not a shipped file, not a folder)
    and written atomically.
    """
    p = ArgumentParser(prog="python -m solutions.train", description="Train the course's GPT. Nothing the course "
                "ships is overwritten: the model goes to --out (default: out/PRESET/gpt.pt) unless "
                "--replace-default-model is given.")
    p.add_argument("--preset", choices=sorted(PRESETS), default="default")
    p.add_argument("--data", default=None, help="folder with train.jsonl and val.jsonl "
                                                "(default: stage 02's corpus in data/corpus, built if missing)")
    p.add_argument("--steps", type=int, help="override the preset's steps (the warmup is capped at it)")
    p.add_argument("--grad-accum", type=int, help="override the preset's gradient accumulation")
    p.add_argument("--seed", type=int, help="override the preset's seed")
    p.add_argument("--out", default=None, help="save the model here with save_checkpoint "
                                               f"(default: {_rel(RUNS_DIR)}/PRESET/gpt.pt)")
    p.add_argument("--replace-default-model", action="store_true",
                   help=f"save the model to {_rel(DEFAULT_WEIGHTS)}, replacing the committed default model that "
                        "stages 04-08 load (only with --preset default, not with --out)")
    p.add_argument("--state", default=None, help="training-state checkpoint to save (and --resume from); "
                                                 "an existing one is overwritten only with --resume")
    p.add_argument("--resume", action="store_true", help="continue from --state")
    p.add_argument("--history", default=None, help="write the run's history as JSON")
    p.add_argument("--plot", default=None, help="write the loss curves as PNG")
    p.add_argument("--threads", type=int, default=None, help="torch threads per process")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)

    for name in ("steps", "grad_accum", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if not isinstance(PRESETS[args.preset].model, GPTConfig):  # the Llama trains on BPE tokens, timed
        p.error(f"--preset {args.preset} is a Llama on BPE tokens: train it with "
                f"python -m solutions.train.llama_default --preset {args.preset} --seconds N")
    if args.replace_default_model and args.out:
        p.error(f"give --out or --replace-default-model, not both (--out {args.out})")
    if args.replace_default_model and args.preset != "default":
        p.error(f"--replace-default-model needs --preset default, got --preset {args.preset}")
    if args.resume and not args.state:
        p.error("--resume needs --state FILE (the training state to continue)")
    if args.state and not args.resume and Path(args.state).exists():
        p.error(f"--state {args.state} exists: pass --resume to continue that run, or choose another path")
    if args.resume and not Path(args.state).is_file():
        p.error(f"--resume: no training state at {args.state}")
    overrides = {k: v for k, v in (("steps", args.steps), ("grad_accum", args.grad_accum), ("seed", args.seed))
                 if v is not None}
    preset = PRESETS[args.preset]
    if args.steps is not None:
        overrides["warmup_steps"] = min(preset.warmup_steps, args.steps)
    if args.replace_default_model:
        out = DEFAULT_WEIGHTS
    else:
        out = Path(args.out) if args.out else RUNS_DIR / args.preset / "gpt.pt"
    outputs = [Path(f) for f in (out, args.state, args.history, args.plot) if f]
    try:
        cfg = replace(preset, **overrides)
        if args.data is not None:  # before anything is built or trained
            corpus_splits(args.data)
        check_outputs(files=outputs, inputs=[Path(args.data or CORPUS_DIR) / f"{s}.jsonl" for s in ("train", "val")],
                      allow=[DEFAULT_WEIGHTS] if args.replace_default_model else [])
        if args.resume:  # a damaged state or another run's state: refused before any work
            saved = load_checked(args.state, keys=TRAINING_STATE_KEYS, what="training state")["config"]
            if saved != asdict(cfg):
                diff = sorted(k for k in set(saved) | set(asdict(cfg)) if saved.get(k) != asdict(cfg).get(k))
                raise ValueError(f"--state {args.state} was saved with another config (differs in {diff}); "
                                 "resume with the same --preset, --steps, --grad-accum and --seed")
        return _run(args, argv, cfg, out)
    except (ValueError, TypeError, FileNotFoundError) as e:  # UnsafeOutputError, CheckpointError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # while writing: the previous outputs are still there (atomic writes)
        print(f"error: {e.strerror or e}: {e.filename or ''}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, argv: list[str] | None, cfg: TrainConfig, out: Path) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    rank, world = setup_distributed()
    train_path, val_path = corpus_splits(args.data)
    train_tokens, val_tokens = load_tokens(train_path), load_tokens(val_path)
    if rank == 0:
        print(f"{args.preset}: {cfg.model.n_layer} layers, {cfg.model.n_embd} dims, {cfg.steps} steps x "
              f"{cfg.batch_size * cfg.grad_accum * world} windows of {cfg.block_size}; "
              f"train {len(train_tokens):,} tokens, val {len(val_tokens):,}; "
              f"{world} process(es) x {torch.get_num_threads()} threads")
    t0 = time.perf_counter()
    model, history = train(cfg, train_tokens, val_tokens, state_path=args.state, resume=args.resume,
                           progress=not args.no_progress)
    seconds = time.perf_counter() - t0
    if rank == 0:
        final = {"loss": history["val_loss"][-1], "bpb": history["val_bpb"][-1]}
        print(f"trained in {history['time'][-1]:.0f} s ({seconds:.0f} s in this session): "
              f"val loss {final['loss']:.4f}, {final['bpb']:.4f} bits/byte")
        if args.history:
            write_text_atomic(args.history, json.dumps(history))
        if args.plot:
            import matplotlib

            matplotlib.use("Agg")
            with atomic_write(args.plot, "wb") as f:
                plot_history(history, label=args.preset).figure.savefig(f, format="png", dpi=120,
                                                                        bbox_inches="tight")
        command = " ".join(["python -m solutions.train", *(sys.argv[1:] if argv is None else argv)])
        meta = {"command": command, "preset": args.preset, "config": asdict(cfg), "seed": cfg.seed,
                "steps": cfg.steps, "tokens_seen": history["tokens"][-1],
                "val_loss": final["loss"], "val_bpb": final["bpb"],
                "val_tokens_evaluated": cfg.eval_tokens, "train_seconds": round(history["time"][-1], 1),
                "processes": world, "threads": torch.get_num_threads(), "torch": str(torch.__version__),
                "history": {k: history[k] for k in ("step", "loss", "lr", "val_step", "val_loss", "val_bpb")},
                "corpus": {"train": describe_split(train_path, train_tokens),
                           "val": describe_split(val_path, val_tokens),
                           "description": "stage 02's deduplicated CPython standard library "
                                          "sources and pydoc topics, byte-level tokens"}}
        save_checkpoint(model, out, meta)
        print(f"saved {out} ({out.stat().st_size / 1e6:.1f} MB)")
        print(sample_gpt(model, "def ", 200, temperature=0.8))
    if world > 1:
        dist.barrier()  # rank 0 may still be saving and sampling: the ranks leave the group together
        dist.destroy_process_group()
    return 0
