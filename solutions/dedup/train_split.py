"""The train split of the standard-library corpus, built once and cached (given code, for stage 03)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from solutions.fileio import write_text_atomic

from .config import PipelineConfig
from .corpus import build_corpus, stdlib_dir
from .pipeline import run_pipeline


def build_train_split(out_dir: str | Path, *, limit: int | None = None,
                      config: PipelineConfig | None = None, progress: bool = False) -> Path:
    """The train split of the standard-library corpus, built once and cached (for stage 03).

    Builds the corpus in a temporary file next to `out_dir` (deleted afterwards: an input
    may not lie inside the output folder) and runs the pipeline into `out_dir`, unless a
    previous run with the same Python, limit and configuration left its report there;
    returns the path of `train.jsonl` (records {"id", "text", "source"}).
    """
    config = PipelineConfig() if config is None else config
    out_dir = Path(out_dir)
    cache_key = {"python": sys.version, "stdlib": str(stdlib_dir()), "limit": limit, "config": config.to_dict()}
    train = out_dir / "train.jsonl"
    report_path = out_dir / "report.json"
    if train.is_file() and report_path.is_file():
        try:
            if json.loads(report_path.read_text(encoding="utf-8")).get("cache_key") == cache_key:
                return train
        except (json.JSONDecodeError, OSError):
            pass
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".partial-{os.getpid()}-corpus.", suffix=".jsonl", dir=out_dir.parent)
    os.close(fd)
    corpus = Path(name)
    try:
        build_corpus(corpus, limit=limit)
        report = run_pipeline(corpus, out_dir, config, progress=progress)
    finally:
        corpus.unlink(missing_ok=True)
    report["cache_key"] = cache_key
    write_text_atomic(report_path, json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    return train
