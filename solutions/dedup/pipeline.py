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
    # BEGIN SOLUTION 2.8
    # HINT: dedup_and_split: pass 1, line by line (`_parse_line` on the raw bytes): count a
    #   malformed line; normalise; a `quality_reason` or an `ExactDeduper` hit is counted and
    #   written to removed.jsonl; a survivor keeps its line, id, source, size and
    #   `shingle_hashes`, MinHashed `config.batch_size` documents at a time.
    # HINT: dedup_and_split: then `lsh_params` -> `candidate_pairs` -> `verify_pairs` (with the
    #   shingle keys when config.verify == "exact") -> `cluster`; `assign_splits(sources,
    #   labels, config.fractions, config.group_depth, salt=str(config.seed))`; pass 2 over
    #   `read_jsonl` writes each kept line, text normalised, to its split.
    hasher = MinHasher(config.num_perm, config.seed, shingle=config.shingle, n=config.n)
    deduper = ExactDeduper()
    report: dict = {
        "input": str(in_path), "input_lines": 0, "malformed": 0, "malformed_lines": [],
        "filtered": {reason: 0 for reason in QUALITY_REASONS},
        "exact_duplicates": 0, "near_duplicates": 0,
    }
    # per document that reaches near-dedup: line, id, source, size; and its shingles
    lines, ids, sources, sizes = [], [], [], []
    keys: list[np.ndarray] = []
    sig_blocks, pending = [], []
    removed = open(work_dir / "removed.jsonl", "w", encoding="utf-8", newline="\n")

    def remove(line_no: int, rec: dict, reason: str, duplicate_of: str | None = None) -> None:
        row = {"line": line_no, "id": rec["id"], "source": rec["source"], "reason": reason}
        if duplicate_of is not None:
            row["duplicate_of"] = duplicate_of
        removed.write(json.dumps(row, ensure_ascii=False) + "\n")

    with removed, tqdm(total=in_path.stat().st_size, unit="B", unit_scale=True,
                       desc="dedup pass 1", disable=not progress) as bar:
        with open(in_path, "rb") as f:
            for line_no, raw in enumerate(f, 1):
                bar.update(len(raw))
                report["input_lines"] += 1
                rec, error = _parse_line(raw)
                if error is not None:
                    report["malformed"] += 1
                    report["malformed_lines"].append({"line": line_no, "error": error})
                    continue
                text = normalize_text(rec["text"])
                reason = quality_reason(text, config.quality)
                if reason is not None:
                    report["filtered"][reason] += 1
                    remove(line_no, rec, reason)
                    continue
                first = deduper.add(rec["id"], text)
                if first is not None:
                    report["exact_duplicates"] += 1
                    remove(line_no, rec, "exact_duplicate", first)
                    continue
                lines.append(line_no)
                ids.append(rec["id"])
                sources.append(rec["source"])
                sizes.append(len(text))
                keys.append(shingle_hashes(text, config.shingle, config.n))
                pending.append(keys[-1])
                if len(pending) >= config.batch_size:
                    sig_blocks.append(hasher.signatures(pending))
                    pending = []
        if pending or not sig_blocks:
            sig_blocks.append(hasher.signatures(pending))
        signatures = np.concatenate(sig_blocks)

        bands, rows = lsh_params(config.threshold, config.num_perm, config.lsh_weights)
        candidates = candidate_pairs(signatures, bands, rows)
        pairs, _ = verify_pairs(candidates, config.threshold, signatures=signatures,
                                shingle_keys=keys if config.verify == "exact" else None)
        labels = cluster(len(ids), pairs)
        keep = labels == np.arange(len(ids))
        for i in np.flatnonzero(~keep).tolist():
            report["near_duplicates"] += 1
            remove(lines[i], {"id": ids[i], "source": sources[i]}, "near_duplicate", ids[labels[i]])

    split = assign_splits(sources, labels, config.fractions, config.group_depth, salt=str(config.seed))
    split_of_line = {lines[i]: int(split[i]) for i in np.flatnonzero(keep).tolist()}
    outs = [open(work_dir / f"{name}.jsonl", "w", encoding="utf-8", newline="\n") for name in SPLITS]
    try:
        for line_no, rec, _ in tqdm(read_jsonl(in_path), desc="dedup pass 2", unit=" lines",
                                    total=report["input_lines"], disable=not progress):
            s = split_of_line.get(line_no)
            if s is not None:
                rec["text"] = normalize_text(rec["text"])
                outs[s].write(json.dumps(rec, ensure_ascii=False) + "\n")
    finally:
        for f in outs:
            f.close()

    kept_idx = np.flatnonzero(keep)
    sizes_arr = np.array(sizes, dtype=np.int64)
    members: dict[int, list[str]] = {}
    for i in np.flatnonzero(np.bincount(labels, minlength=len(ids))[labels] > 1).tolist():
        members.setdefault(int(labels[i]), []).append(ids[i])
    report.update({
        "kept": {name: int(np.count_nonzero(split[kept_idx] == s)) for s, name in enumerate(SPLITS)},
        "kept_chars": {name: int(sizes_arr[kept_idx][split[kept_idx] == s].sum()) for s, name in enumerate(SPLITS)},
        "near_duplicate_clusters": len(members),
        "clusters": list(members.values()),
        "candidate_pairs": int(len(candidates)),
        "verified_pairs": int(len(pairs)),
        "params": {**config.to_dict(), "bands": bands, "rows": rows},
        "outputs": {name: f"{name}.jsonl" for name in (*SPLITS, "removed")},
    })
    return report
    # END SOLUTION


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
