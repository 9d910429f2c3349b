"""Stage 04 benchmark, weight quantisation and checkpoint loading (issue 20); run by
`bench.py --quant` / `bench.py --load`, or by itself with the same flags.

`--quant`: THE TABLE of the lesson's weight-quantisation section for the default model:
fp32 / bf16 / int8 (fused kernel, and dequantise-then-matmul) / int4 round-to-nearest / int4
AWQ weights x float or INT8 KV cache: weight bytes, KV bytes per token, stage 03's harness
(bits per byte per source, line-completion exact match and edit similarity on the val/test
sets) and its gate against the fp32 row (stage 03's MARGINS), greedy agreement with fp32
(four fixed prompts), decode tokens/s at batch 1; then one matrix-vector product per weight
format, for this model's largest layer and a 4096 x 4096 one (where the kernel's speed comes
from). `--load`: peak memory and time of loading a state dict with torch.load and with
safetensors, each in a fresh process, for the default model and a synthetic 100 MB one.

    COURSE_IMPL=solution python 04_kv_cache/bench.py --quant|--load --threads 1 [--quick] [--json FILE]
"""

from __future__ import annotations

import json

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

import course  # noqa: E402
from course.bench_impl import SMOKE, add_impl_argument, load_impl, run_bench  # noqa: E402
from course.benchmark import Report, bench_args, measure  # noqa: E402
from solutions.gpt import GPT, load_default  # noqa: E402

kc = None  # the package measured: set by bench.py, or `load_impl` in run() (after the arguments)


# ---- --quant: weight quantisation judged by stage 03's evaluation harness (issue 20) ------

class ThroughCache(torch.nn.Module):
    """`model`, its logits computed through a fresh cache of kind `cache` (a prefill with
    forward_cached): every position attends over K/V as stored there (INT8: quantised), so
    stage 03's harness, which calls model(ids), measures what the cache costs in quality."""

    def __init__(self, model: GPT, cache: str):
        super().__init__()
        self.model, self.cache, self.config = model, cache, model.config

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        cache = kc.CACHES[self.cache].for_model(self.model, idx.shape[0], max_len=idx.shape[1])
        return kc.forward_cached(self.model, idx, cache)


def calibration_windows(n: int = 16, length: int = 256, seed: int = 0) -> torch.Tensor:
    """(n, length) token ids: windows at seeded random offsets of stage 02's TRAIN split (the
    harness evaluates on val/test, so calibration never sees evaluation text)."""
    from solutions.train.cli import corpus_splits
    from solutions.train.data import load_tokens

    train_path, _ = corpus_splits(None)
    tokens = load_tokens(train_path)
    starts = torch.randint(0, len(tokens) - length, (n,), generator=torch.Generator().manual_seed(seed))
    return torch.stack([tokens[s:s + length].long() for s in starts.tolist()])


def quant_variants(model: GPT, group_size: int = 32) -> dict[str, GPT]:
    """The weight variants of THE TABLE, each a new model (the fp32 one is `model`)."""
    import copy

    windows = calibration_windows(2, 32) if SMOKE else calibration_windows()  # smoke: COURSE_BENCH_SMOKE=1
    awq, _ = kc.awq_quantize(model, windows, group_size)
    return {"fp32": model, "bf16": copy.deepcopy(model).to(torch.bfloat16),
            "int8 (kernel)": kc.quantize_model(model, 8),
            "int8 (dequantise)": kc.quantize_model(model, 8, use_kernel=False),
            f"int4 RTN g{group_size}": kc.quantize_model(model, 4, group_size),
            f"int4 AWQ g{group_size}": awq}


def smoke_eval_sets():
    """Smoke mode (COURSE_BENCH_SMOKE=1): stage 03's evaluation sets, tiny: the first val
    document of each source and two line-completion examples of the first code one (not
    `load_eval_sets`, whose selection scans the whole train split)."""
    from solutions.train.cli import corpus_splits
    from solutions.train.eval_sets import EvalSets, read_split
    from solutions.train.line_completion import candidate_lines

    first: dict = {}
    for d in read_split(corpus_splits(None)[1], "val"):
        first.setdefault(d.source, d)
    code = first["code"]
    return EvalSets(tuple(first.values()), tuple(candidate_lines(code.split, code.doc_id, code.text)[:2]),
                    {"smoke": "first val document of each source, two completions"})


def agreement_prompts() -> list[list[int]]:

    """Four fixed prompts of 64 bytes: the start of four standard-library modules' source."""
    import os, textwrap  # noqa: E401

    return [list(Path(m.__file__).read_bytes()[:64]) for m in (json, os, textwrap, statistics)]


def decode_tps(runs: dict[str, tuple[GPT, str]], args, n_new: int = 128) -> dict[str, float]:
    """Tokens/s of greedy generate, batch 1, a 64-byte prompt + n_new tokens, for every
    (model, cache) of `runs`, timed in alternation (one run of each in turn, medians), so
    that a change of load on the shared machine falls on all of them alike."""
    prompt = [list(Path(json.__file__).read_bytes()[:64])]
    fns = {k: (lambda m=m, c=c: kc.generate(m, prompt, n_new, cache=c)) for k, (m, c) in runs.items()}
    times: dict[str, list[float]] = {k: [] for k in fns}
    with torch.no_grad():
        for r in range(args.warmup + args.repeat):
            for k, fn in fns.items():
                t = measure(fn, repeat=1, warmup=0).median
                if r >= args.warmup:
                    times[k].append(t)
    return {k: n_new / statistics.median(t) for k, t in times.items()}


def quant_table(args) -> dict:
    """fp32 / bf16 / int8 / int4-RTN / int4-AWQ weights x (float or INT8 KV cache): bytes,
    harness metrics (stage 03: bits per byte per source, line-completion exact match and edit
    similarity) and its gate against fp32, greedy agreement with fp32, decode tokens/s."""
    from solutions.train import MARGINS, evaluate_model, gate, load_eval_sets

    rep = Report("04_kv_cache", args, "weight quantisation, judged by stage 03's harness")
    model, _ = load_default()
    print(f"implementation: {course.current_impl()}; threads {torch.get_num_threads()}; "
          f"int8 kernel (torch._weight_int8pack_mm): {kc.int8_kernel_available()}", flush=True)
    sets = smoke_eval_sets() if SMOKE else load_eval_sets(n_examples=30 if args.quick else 150)
    variants = quant_variants(model)
    prompts = agreement_prompts()
    n_agree = 4 if SMOKE else 16 if args.quick else 64
    with torch.no_grad():
        ref_tokens = kc.generate(model, prompts, n_agree, cache="prealloc").tokens
    baseline, rows, runs = None, {}, {}
    for name, m in variants.items():
        sizes = kc.weight_bytes(m)
        for cache in ("prealloc", "int8"):
            kv = kc.CACHES[cache].for_model(m, 1, max_len=1).bytes_per_token()
            report = evaluate_model(m if cache == "prealloc" else ThroughCache(m, cache), sets=sets,
                                    name=f"{name}, {cache} KV", **({"max_new": 4} if SMOKE else {}))
            if baseline is None:
                baseline = report
            problems = gate(report, baseline)
            with torch.no_grad():
                got = kc.generate(m, prompts, n_agree, cache=cache).tokens
            agree = sum(a == b for g, r in zip(got, ref_tokens) for a, b in zip(g, r)) / sum(map(len, ref_tokens))
            mt = report.metrics
            key = f"{name}, {'int8' if cache == 'int8' else 'float'} KV"
            runs[key] = (m, cache)
            rows[key] = {"weights MB": sizes["total"] / 1e6, "linear MB": sizes["linear"] / 1e6,
                         "KV B/token": kv, "code bpb": mt["code.bpb"], "prose bpb": mt["prose.bpb"],
                         "EM %": mt["exact_match"], "ES %": mt["edit_similarity"], "greedy = fp32": agree,
                         "gate vs fp32": "pass" if not problems else "FAIL: " + "; ".join(problems)}
            print(f"  evaluated {key}", flush=True)
    print("  timing decode, every row in alternation", flush=True)
    tps = decode_tps(runs, args, n_new=4 if SMOKE else 128)
    for key, row in rows.items():
        gate_result = row.pop("gate vs fp32")
        rep.add(key, **row, **{"tok/s": tps[key], "gate vs fp32": gate_result})
    rep.add("margins (stage 03 MARGINS)", **{"gate vs fp32": ", ".join(
        f"{k} {'-' if v.higher_is_better else '+'}{v.by}" for k, v in MARGINS.items())})
    out = rep.finish()
    out["eval_sets"] = sets.fingerprint
    out["matmul"] = matmul_times(args)
    return out


def matmul_times(args) -> dict:
    """Where the INT8 kernel's speed comes from: one (1, K) @ (K, N) product, the weight fp32,
    int8 through the kernel, or int8/int4 dequantised first, for this model's largest layer and
    a 4096 x 4096 one (a 7B model's size, 64 MiB in fp32: far bigger than the CPU's caches)."""
    import torch.nn.functional as F

    rows = {}
    for n, k in ((768, 192), (512, 512) if SMOKE else (4096, 4096)):  # smoke: COURSE_BENCH_SMOKE=1
        w = torch.randn(n, k, generator=torch.Generator().manual_seed(0))
        lin = torch.nn.Linear(k, n, bias=False)
        with torch.no_grad():
            lin.weight.copy_(w)
        q8, q8d = kc.QuantLinear(lin, 8), kc.QuantLinear(lin, 8, use_kernel=False)
        q4 = kc.QuantLinear(lin, 4, 32)
        x = torch.randn(1, k)
        fns = {"fp32": lambda: F.linear(x, w), "int8 kernel": lambda: q8(x), "int8 dequantise": lambda: q8d(x),
               "int4 dequantise": lambda: q4(x), "int8 kernel, fp32 path": lambda: torch._weight_int8pack_mm(
                   x, q8.qweight, q8.scale.reshape(-1))}
        number = 2 if SMOKE else 200 if k < 1000 else 5
        with torch.no_grad():
            rows[f"{n}x{k}"] = {name: measure(fn, repeat=args.repeat, warmup=1, number=number).median * 1e6
                                for name, fn in fns.items()}
        print(f"  matmul (1, {k}) @ ({k}, {n}), microseconds: "
              + ", ".join(f"{a} {b:.1f}" for a, b in rows[f"{n}x{k}"].items()), flush=True)
    return rows


# ---- --load: torch.load against safetensors, peak memory and time in fresh processes -----

_LOAD_CHILD = r"""
import json, sys, time
import torch
kind, path = sys.argv[1], sys.argv[2]
if kind.startswith("safetensors") or kind == "checked safetensors":
    from safetensors.torch import load_file
    from solutions.kv_cache import read_safetensors
if kind == "checked torch.load":
    from solutions.fileio import load_checked
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
try:
    open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current RSS
    reset = True
except OSError:
    reset = False
base = status("VmRSS:")
t0 = time.perf_counter()
if kind == "torch.load":
    sd = torch.load(path, map_location="cpu", weights_only=True)
elif kind == "torch.load mmap":
    sd = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
elif kind == "safetensors":
    sd = load_file(path)
elif kind == "checked torch.load":
    sd = load_checked(path)
elif kind == "checked safetensors":
    sd, _ = read_safetensors(path)
total = sum(float(v.float().sum()) for v in sd.values() if isinstance(v, torch.Tensor))  # touch every byte
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "peak": status("VmHWM:") - base, "rss": status("VmRSS:") - base,
                  "reset": reset, "check": total}))
"""


def _child_here(kind: str, path: str) -> dict:
    """Smoke mode (COURSE_BENCH_SMOKE=1): `_LOAD_CHILD` run in this process, not a fresh one
    (a fresh Python with torch costs seconds of CPU each): the same code, figures meaningless."""
    import contextlib
    import io

    saved, out = sys.argv, io.StringIO()
    try:
        sys.argv = ["-c", kind, path]
        with contextlib.redirect_stdout(out):
            exec(compile(_LOAD_CHILD, "<_LOAD_CHILD>", "exec"), {"__name__": "__main__"})
    finally:
        sys.argv = saved
    return json.loads(out.getvalue().strip().splitlines()[-1])


def load_table(args) -> dict:

    """Peak memory above the process's resident size before the load, and time, of loading a
    state dict (then reading every tensor once), each measurement in a fresh process (VmHWM
    from /proc, reset before the load), the file already in the page cache."""
    import subprocess
    import tempfile

    from safetensors.torch import save_file

    from solutions.fileio import save_checked

    rep = Report("04_kv_cache", args, "loading a state dict: torch.load (pickle) vs safetensors")
    model, _ = load_default()
    n = 1 if SMOKE else 5 if args.quick else 25  # 25 tensors of 1M float32: 100 MB
    synthetic = {f"layer{i}.weight": torch.randn(1000, 1000, generator=torch.Generator().manual_seed(i))
                 for i in range(n)}
    default_sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench04-load-") as tmp:
        for label, sd in (("default model (fp32)", default_sd), (f"synthetic {n} x 4 MB", synthetic)):
            files = {"pt": Path(tmp) / "sd.pt", "st": Path(tmp) / "sd.safetensors", "ck": Path(tmp) / "ck.pt",
                     "cks": Path(tmp) / "ck.safetensors"}
            torch.save(sd, files["pt"])
            save_file(sd, str(files["st"]))
            save_checked(files["ck"], sd)
            from solutions.fileio import content_digest
            from safetensors.torch import save
            ordered = dict(sorted(sd.items()))
            files["cks"].write_bytes(save(ordered, metadata={"sha256": content_digest(ordered)}))
            size = files["pt"].stat().st_size
            kinds = {"torch.load": "pt", "torch.load mmap": "pt", "safetensors": "st",
                     "checked torch.load": "ck", "checked safetensors": "cks"}
            res: dict[str, list[dict]] = {k: [] for k in kinds}
            for r in range(1 if SMOKE else 0, 1 + args.repeat):  # round 0 warms the page cache, untimed (not in smoke)
                for kind, f in kinds.items():
                    if SMOKE and kind != "torch.load":  # smoke: one fresh process, the others' code run here
                        res[kind].append(_child_here(kind, str(files[f])))
                        continue
                    proc = subprocess.run([sys.executable, "-c", _LOAD_CHILD, kind, str(files[f])],
                                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1],
                                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"}, timeout=600)
                    if proc.returncode:
                        raise RuntimeError(f"{kind}: {proc.stderr[-2000:]}")
                    if r:
                        res[kind].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            for kind, runs in res.items():
                peak = statistics.median(x["peak"] for x in runs)
                rep.add(f"{label}: {kind}", **{"file MB": files[kinds[kind]].stat().st_size / 1e6,
                                               "peak MB": peak / 1e6, "peak / size": peak / size,
                                               "ms": statistics.median(x["seconds"] for x in runs) * 1e3,
                                               "peak reset": all(x["reset"] for x in runs)})
            out[label] = {k: v for k, v in res.items()}
    return rep.finish()



def add_arguments(p) -> None:
    p.add_argument("--quant", action="store_true",
                   help="the weight-quantisation table (fp32/bf16/int8/int4 RTN/AWQ x KV cache), not the decode bench")
    p.add_argument("--load", action="store_true",
                   help="the checkpoint-loading table (torch.load vs safetensors: peak memory, time)")


def run(args) -> dict:
    """The parts that `args.quant` / `args.load` ask for; writes --json when given."""
    global kc
    if kc is None:
        kc = load_impl(args, "kv_cache")
    out = {}
    if args.quant:
        out["quant"] = quant_table(args)
    if args.load:
        out["load"] = load_table(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
    return out


if __name__ == "__main__":
    run_bench(lambda: run(bench_args("Stage 04: weight quantisation and checkpoint loading",
                                     extra=lambda p: (add_arguments(p), add_impl_argument(p)))))
