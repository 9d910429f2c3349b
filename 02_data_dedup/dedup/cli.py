# GENERATED from solutions/dedup/cli.py by `course stubs --write`.
# Nothing to write here: given code of stage 02 (02_data_dedup/02_data_dedup.ipynb).
"""The command line (given code): `python -m solutions.dedup IN.jsonl OUT_DIR [options]`
or `python -m solutions.dedup --build-corpus FILE`."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

from solutions.checks import ArgumentParser

from .config import PipelineConfig
from .corpus import build_corpus
from .pipeline import run_pipeline
from .quality import PROFILE_HELP, QUALITY_PROFILES, quality_profile
from .report import format_report
from .shingles import SHINGLE_KINDS


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m solutions.dedup IN.jsonl OUT_DIR [options]` or `--build-corpus FILE`.

    Exit status: 0 done; 2 bad arguments, unsafe paths or an input that is no JSON Lines
    (empty, compressed, not one line a record: `error: ...` on stderr naming the file, nothing
    written); 1 the run failed while writing (the previous outputs are left as they were).
    """
    d = PipelineConfig()
    profiles = "; ".join(f"{name}: {text}" for name, text in PROFILE_HELP.items())
    p = ArgumentParser(
        prog="python -m solutions.dedup",
        description="Normalise, filter, deduplicate (exact and MinHash/LSH) and split a JSON Lines corpus "
                    "of {id, text, source} records. Outputs are written to a temporary folder and moved "
                    "into OUT_DIR only when complete; an input inside OUT_DIR is refused.")
    p.add_argument("input", nargs="?", help="input JSON Lines file")
    p.add_argument("out_dir", nargs="?", help="output folder (train/val/test.jsonl, removed.jsonl, report.json); "
                                              "must not hold the input")
    p.add_argument("--build-corpus", metavar="FILE", help="write the standard-library corpus to FILE and exit")
    p.add_argument("--limit", type=int, default=None, help="with --build-corpus: at most this many documents")
    p.add_argument("--packages", nargs="+", default=None, help="with --build-corpus: only these top-level packages")
    p.add_argument("--threshold", type=float, default=d.threshold, help="near-duplicate Jaccard threshold")
    p.add_argument("--num-perm", type=int, default=d.num_perm, help="MinHash permutations")
    p.add_argument("--seed", type=int, default=d.seed, help="MinHash and split seed")
    p.add_argument("--shingle", choices=SHINGLE_KINDS, default=d.shingle, help="word n-grams or character k-grams")
    p.add_argument("--ngram", type=int, default=d.n, help="n (words) or k (characters) per shingle")
    p.add_argument("--verify", choices=("exact", "estimate"), default=d.verify, help="how candidate pairs are verified")
    p.add_argument("--fn-weight", type=float, default=d.lsh_weights[1],
                   help="LSH: weight of missed pairs (false negatives); false positives get 1 - this")
    p.add_argument("--fractions", type=float, nargs=3, default=d.fractions, metavar=("TRAIN", "VAL", "TEST"))
    p.add_argument("--group-depth", type=int, default=d.group_depth, help="path components naming a source group")
    p.add_argument("--profile", choices=sorted(QUALITY_PROFILES), default="code",
                   help=("quality filters (default: code). " + profiles).replace("%", "%%"))
    g = p.add_argument_group("quality bounds", "override one bound of the --profile (the report then says "
                                               "'custom')")
    g.add_argument("--min-chars", type=int, default=None)
    g.add_argument("--max-chars", type=int, default=None)
    g.add_argument("--max-line-chars", type=int, default=None)
    g.add_argument("--min-printable", type=float, default=None)
    g.add_argument("--min-letters", type=float, default=None)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if args.build_corpus and (args.input or args.out_dir):
        p.error("give either --build-corpus FILE or IN.jsonl OUT_DIR, not both")
    if not args.build_corpus and (args.limit is not None or args.packages is not None):
        p.error("--limit and --packages go with --build-corpus FILE")
    if not args.build_corpus and (not args.input or not args.out_dir):
        p.error("give IN.jsonl and OUT_DIR (or --build-corpus FILE)")
    if not 0.0 <= args.fn_weight <= 1.0:
        p.error(f"--fn-weight must be in [0, 1], got {args.fn_weight}")
    try:
        if args.build_corpus:
            stats = build_corpus(args.build_corpus, limit=args.limit, packages=args.packages)
            print(f"wrote {stats['documents']} documents to {stats['path']} "
                  f"({stats['skipped_not_utf8']} files skipped: not UTF-8)")
            return 0
        bounds = {k: getattr(args, k) for k in ("min_chars", "max_chars", "max_line_chars", "min_printable",
                                                 "min_letters") if getattr(args, k) is not None}
        config = PipelineConfig(
            threshold=args.threshold, num_perm=args.num_perm, seed=args.seed, shingle=args.shingle,
            n=args.ngram, verify=args.verify, lsh_weights=(1.0 - args.fn_weight, args.fn_weight),
            fractions=tuple(args.fractions), group_depth=args.group_depth,
            quality=dataclasses.replace(quality_profile(args.profile), **bounds))
        report = run_pipeline(args.input, args.out_dir, config, progress=not args.no_progress)
    except (ValueError, TypeError, FileNotFoundError) as e:
        return _fail(e, 2)
    except OSError as e:
        return _fail(e, 1)
    print(format_report(report))
    print(f"\n{report['seconds']:.1f} s, {report['docs_per_second']:.0f} documents/s; "
          f"wrote {args.out_dir}/{{train,val,test,removed}}.jsonl and report.json")
    return 0


def _fail(e: BaseException, code: int) -> int:
    message = str(e) if not isinstance(e, OSError) or not e.strerror else f"{e.strerror}: {e.filename}"
    print(f"error: {message}", file=sys.stderr)
    return code
