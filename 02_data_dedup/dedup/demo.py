# GENERATED from solutions/dedup/demo.py by `course stubs --write`.
# Nothing to write here: given code of stage 02 (02_data_dedup/02_data_dedup.ipynb).
"""`course demo` for stage 02 (given code): the pipeline on a slice of the standard library."""

from __future__ import annotations

import tempfile
from pathlib import Path

from .corpus import build_corpus, stdlib_dir
from .pipeline import run_pipeline
from .report import format_report


def demo() -> None:
    """Build a bounded slice of the standard-library corpus, clean it, print the report."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        stats = build_corpus(corpus, packages=["encodings", "email", "json", "test", "pydoc_data"], limit=1200)
        print(f"corpus: {stats['documents']} documents from the standard library at {stdlib_dir()} "
              f"({stats['skipped_not_utf8']} files skipped: not UTF-8)")
        report = run_pipeline(corpus, Path(tmp) / "out", progress=False)
        print(format_report(report))
        print(f"\n{report['seconds']:.1f} s; {report['candidate_pairs']} LSH candidate pairs, "
              f"{report['verified_pairs']} verified (bands x rows = {report['params']['bands']} x "
              f"{report['params']['rows']})")
        for members in report["clusters"][:5]:
            print("  cluster:", ", ".join(members[:4]) + (" ..." if len(members) > 4 else ""))
