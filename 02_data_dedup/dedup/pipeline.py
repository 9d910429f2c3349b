# GENERATED from solutions/dedup/pipeline.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 02_data_dedup/02_data_dedup.ipynb. Exercises in this file (line of each hole, then the commands):
#   2.8 The streaming pipeline and report: line 40; `course check 2.8`, `course hint 2.8`
"""The streaming pipeline (exercise 2.8): JSON Lines in, splits out, every line accounted for."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from solutions.fileio import check_outputs, staged_outputs

from .clusters import cluster
from .config import OUTPUT_FILES, SPLITS, PipelineConfig
from .exact import ExactDeduper
from .jsonl import _parse_line, first_line_preview, not_json_lines, read_jsonl
from .lsh import candidate_pairs, lsh_params, verify_pairs
from .minhash import MinHasher
from .normalize import normalize_text
from .quality import QUALITY_REASONS, profile_name, quality_reason
from .report import accounted
from .shingles import shingle_hashes
from .splits import assign_splits


def dedup_and_split(in_path: Path, work_dir: Path, config: PipelineConfig, progress: bool = False) -> dict:
    """What `run_pipeline` computes (exercise 2.8; its docstring is the contract): `in_path` the
    JSON Lines input it accepted, `work_dir` an empty folder that receives train/val/test/
    removed.jsonl as it describes, `progress` tqdm bars on stderr. Returns its report less the
    three keys it adds (quality_profile, seconds, docs_per_second).

    Invariants (each tested): every input line lands in exactly one place (input_lines =
    malformed + filtered + exact + near duplicates + kept), the first rule of `run_pipeline`'s
    list that applies; the outputs and report do not depend on `config.batch_size`; no text is
    held beyond the line being read (per document: line number, id, source, size, hashes, signature)."""
    raise NotImplementedError('Exercise 2.8: The streaming pipeline and report — see 02_data_dedup.ipynb')


def run_pipeline(in_path: str | Path, out_dir: str | Path, config: PipelineConfig | None = None,
                 progress: bool = True) -> dict:
    """Clean and deduplicate a JSON Lines corpus; write the splits and a report; return the report.

    Outputs (`OUTPUT_FILES`) in `out_dir`, one JSON object per line:
    - `train.jsonl`, `val.jsonl`, `test.jsonl`: the kept input records, in input order,
      `"text"` normalised, every other field unchanged;
    - `removed.jsonl`: one row per removed valid record, {"line", "id", "source", "reason"}
      and, for "exact_duplicate" and "near_duplicate", "duplicate_of" (see below); the
      other reasons are those of `QUALITY_REASONS`;
    - `report.json`: the returned dict: "input" (the path), "input_lines", "malformed",
      "malformed_lines" ([{"line", "error"}]), "filtered" ({reason: count} for every reason),
      "exact_duplicates", "near_duplicates", "kept" and "kept_chars" ({split: documents /
      characters of normalised text}), "near_duplicate_clusters" (how many clusters of two
      or more), "clusters" (each one's ids in input order, the kept one first),
      "candidate_pairs", "verified_pairs", "params" (`config.to_dict()` with "bands", "rows"),
      "outputs" ({"train": "train.jsonl", ...}); given code adds "quality_profile",
      "seconds" and "docs_per_second".

    Every line lands in one place, the first that applies: malformed (`_parse_line`'s
    reason); filtered (the first `quality_reason` of its normalised text under
    `config.quality`); "exact_duplicate" (its normalised text is that of an earlier record
    not filtered, whose id is "duplicate_of"); "near_duplicate" (in a cluster, by `cluster`,
    of the remaining documents linked by verified pairs, but not its first document, whose
    id is "duplicate_of"); else kept. The pairs: MinHash (`config.num_perm`, `seed`,
    `shingle`, `n`), LSH bands x rows from `lsh_params(config.threshold, config.num_perm,
    config.lsh_weights)`, candidates verified at >= `config.threshold` by the exact Jaccard
    of the shingles (the signatures' estimate with `verify="estimate"`). A kept record's
    split: `assign_splits(sources, labels, config.fractions, config.group_depth,
    salt=str(config.seed))` over the documents that reached the clustering, in input order.
    No document's text stays in memory beyond the line being read (`dedup_and_split`,
    exercise 2.8, reads the input twice).

    Accounting, always: input lines = malformed + filtered + exact duplicates + near
    duplicates + kept (checked here). Running the pipeline on its own output removes
    nothing more. Nothing is lost: an input inside `out_dir`, an `out_dir` that is a file
    or not writable, an output path that is a folder are refused (`UnsafeOutputError`, a
    ValueError) before anything is written; the files are written into a fresh temporary
    folder next to the outputs, moved into `out_dir` only when the run finishes (report.json
    last), so a run that fails or is killed leaves the previous outputs. An input that is
    empty, compressed or UTF-16 (`not_json_lines`), or in which not one line is a record
    (every line malformed), is refused with a ValueError that names the file and what it
    looks like, and nothing is replaced. Raises TypeError for a config that is not a
    PipelineConfig, FileNotFoundError for a missing input.
    """
    config = PipelineConfig() if config is None else config
    if not isinstance(config, PipelineConfig):
        raise TypeError(f"config must be a PipelineConfig, got {type(config).__name__}")
    in_path, out_dir = Path(in_path), Path(out_dir)
    if in_path.is_dir():
        raise ValueError(f"in_path {in_path} is a folder; give a JSON Lines file")
    if not in_path.is_file():
        raise FileNotFoundError(f"no such input file: {in_path}")
    check_outputs(folder=out_dir, files=[out_dir / name for name in OUTPUT_FILES], inputs=[in_path])
    as_they_were = f" (the outputs in {out_dir} are as they were)" if out_dir.exists() else ""
    kept = f"; nothing was written{as_they_were}"
    why = not_json_lines(in_path)
    if why is not None:  # a compressed or empty file: refused before a line is read
        raise ValueError(f"the input {in_path} {why}{kept}")
    started = time.perf_counter()
    with staged_outputs(out_dir, OUTPUT_FILES) as work_dir:
        report = dedup_and_split(in_path, work_dir, config, progress)
        if report["malformed"] == report["input_lines"]:  # not one record: no splits replace the old
            first = (report.get("malformed_lines") or [{}])[0].get("error", "?")
            raise ValueError(
                f"no line of the input {in_path} is a record: all {report['input_lines']} lines are "
                f"malformed (line 1: {first}; it begins {first_line_preview(in_path)}). JSON Lines "
                f"holds one JSON object {{\"id\", \"text\", \"source\"}} per line{kept}")
        report["quality_profile"] = profile_name(config.quality)
        report["seconds"] = round(time.perf_counter() - started, 3)
        report["docs_per_second"] = round(report["input_lines"] / max(report["seconds"], 1e-9), 1)
        if accounted(report) != report["input_lines"]:
            raise AssertionError(f"lost documents: input {report['input_lines']} != accounted {accounted(report)}")
        (work_dir / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n",
                                              encoding="utf-8")
    return report
