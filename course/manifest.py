"""The course manifest: every stage and every exercise, with its title and points.

This is the one place exercises are declared. The stub generator takes exercise titles
from here, `course status` and `course grade` take points from here, and a course-level
test checks that the solution markers (`# BEGIN SOLUTION 1.3`) and the test markers
(`@pytest.mark.exercise("1.3")`) name exactly the exercises listed here.

Each stage edits only its own block.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Exercise:
    id: str  # "stage.number", e.g. "1.3"
    title: str
    points: int
    # Exercises whose code this one's tests call (ids, any stage): until those are done,
    # some of its tests stop at their TODO or fail through them. `course check` and
    # `course status` show "blocked by ..." from this.
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stage:
    number: str  # "01"
    module: str  # "autograd": the packages NN_<folder>/<module>/ (the learner's) and solutions/<module>/
    folder: str  # "01_autograd"
    title: str
    exercises: tuple[Exercise, ...] = field(default_factory=tuple)

    @property
    def notebook(self) -> str:
        return f"{self.folder}/{self.folder}.ipynb"


def _ex(*rows: tuple) -> tuple[Exercise, ...]:
    """Rows `(id, title, points)` or `(id, title, points, requires)`; `requires` is a
    space-separated string of exercise ids ("1.3 1.4") or a tuple of them."""
    out = []
    for row in rows:
        i, t, p, *req = row
        r = req[0] if req else ()
        out.append(Exercise(i, t, p, tuple(r.split()) if isinstance(r, str) else tuple(r)))
    return tuple(out)


STAGES: tuple[Stage, ...] = (
    # --- stage 01 -------------------------------------------------------------------
    Stage("01", "autograd", "01_autograd", "A NumPy autograd engine", _ex(
        ("1.1", "Backward in topological order", 15),
        ("1.2", "Arithmetic with broadcasting", 15, "1.1"),
        ("1.3", "Reductions: sum, mean, max", 10, "1.1 1.2"),
        ("1.4", "Matrix multiply, 2-D and batched", 10, "1.1 1.2 1.3"),
        ("1.5", "Reshape, transpose and indexing", 15, "1.1 1.2 1.3"),
        ("1.6", "Nonlinearities", 5, "1.1 1.2 1.3 1.4"),
        ("1.7", "Softmax and cross-entropy", 20, "1.1 1.2 1.3"),
        ("1.8", "Linear, MLP and SGD", 10, "1.1 1.2 1.4 1.6 1.7"),
    )),
    # --- end stage 01 ---------------------------------------------------------------
    # --- stage 02 -------------------------------------------------------------------
    Stage("02", "dedup", "02_data_dedup", "Data cleaning and deduplication", _ex(
        ("2.1", "Normalisation and quality filters", 10),
        ("2.2", "Exact deduplication with SHA-256", 5),
        ("2.3", "Shingles: character and word n-grams", 10),
        ("2.4", "Vectorised MinHash signatures", 20, "2.3"),
        ("2.5", "LSH banding and verification", 18, "2.3 2.4"),
        ("2.6", "Union-find clustering", 10),
        ("2.7", "Splits without leakage", 10, "2.6"),
        ("2.8", "The streaming pipeline and report", 17, "2.1 2.2 2.3 2.4 2.5 2.6 2.7"),
        ("2.9", "The byte-to-unicode map", 4),
        ("2.10", "The pre-tokenizer split", 6),
        ("2.11", "BPE encoding: merges by rank, special tokens whole", 14, "2.9 2.10"),
        ("2.12", "Decoding any id sequence", 4, "2.9"),
        ("2.13", "Training BPE: counts, ties, merges", 12, "2.9 2.10"),
    )),
    # --- end stage 02 ---------------------------------------------------------------
    # --- stage 03 -------------------------------------------------------------------
    Stage("03", "train", "03_training_loop", "The training loop", _ex(
        ("3.1", "SGD with momentum", 8),
        ("3.2", "AdamW", 12),
        ("3.3", "Warmup + cosine learning-rate schedule", 8),
        ("3.4", "Gradient clipping by global norm", 6),
        ("3.5", "Byte-level MLP language model", 10, "3.2"),
        ("3.6", "The training loop on the engine", 12, "3.1 3.2 3.3 3.4 3.5"),
        ("3.7", "Batches of random windows", 4),
        ("3.8", "Training step: accumulation and NaN guard", 12, "3.7"),
        ("3.9", "Evaluation: loss and bits per byte", 10, "3.3 3.7 3.8"),
        ("3.10", "Checkpoints that resume exactly", 8, "3.3 3.7 3.8 3.9"),
        ("3.11", "Distributed data parallel", 10, "3.3 3.7 3.8 3.9"),
        ("3.12", "Bits per byte per document, with a confidence interval", 8, "3.9"),
        ("3.13", "Line completion: edit similarity, exact match, a held-out set", 10),
        ("3.14", "The regression gate", 5, "3.9 3.12 3.13"),
        ("3.15", "RMSNorm", 4),
        ("3.16", "Rotary position embeddings, positions per row", 10),
        ("3.17", "The SwiGLU MLP", 4),
        ("3.18", "Grouped-query attention", 8, "3.15 3.16 3.17"),
    )),
    # --- end stage 03 ---------------------------------------------------------------
    # --- stage 04 -------------------------------------------------------------------
    Stage("04", "kv_cache", "04_kv_cache", "The KV cache", _ex(
        ("4.1", "Attention against a cache", 30),
        ("4.2", "ConcatKVCache: the torch.cat baseline", 10, "4.1"),
        ("4.3", "KVCache: preallocated, written in place", 10, "4.1"),
        ("4.4", "QuantizedKVCache: INT8 K/V", 15, "4.1 4.3"),
        ("4.5", "Sampling: greedy, temperature, top-k/p", 15),
        ("4.6", "generate with any cache or none", 20, "4.1 4.2 4.3 4.4 4.5"),
        ("4.7", "The repetition penalty (CTRL)", 8),
        ("4.8", "INT4 weights: groups, zero points, packing", 10),
        ("4.9", "QuantLinear: INT8/INT4 weights on the fly", 10, "4.4 4.8"),
        ("4.10", "AWQ: activation-aware INT4 scales", 10, "4.8 4.9"),
        ("4.11", "A GGUF reader: header, metadata, tensor infos, alignment", 10),
        ("4.12", "GGUF's Q8_0 and Q4_1 blocks back to float32", 10, "4.11"),
        ("4.13", "GGUF's tensors onto Llama: names, Q/K un-permuted", 10, "4.11 4.12"),
    )),
    # --- end stage 04 ---------------------------------------------------------------
    # --- stage 05 -------------------------------------------------------------------
    Stage("05", "batching", "05_batching", "Static, dynamic and continuous batching", _ex(
        ("5.1", "The request lifecycle", 10),
        ("5.2", "Static batching and the ragged step", 25, "5.1"),
        ("5.3", "Dynamic batching: full or timed out", 8, "5.1 5.2"),
        ("5.4", "Continuous batching", 5, "5.1 5.2"),
        ("5.5", "Chunked prefill: a token budget", 15, "5.1 5.2 5.4"),
        ("5.6", "Preemption, requeue and abort", 20, "5.1 5.2 5.4 5.5"),
        ("5.7", "Metrics: TTFT, TPOT, ITL, p50/p99", 17, "5.1 5.2 5.4 5.6"),
    )),
    # --- end stage 05 ---------------------------------------------------------------
    # --- stage 06 -------------------------------------------------------------------
    Stage("06", "paged", "06_paged_attention", "Paged attention", _ex(
        ("6.1", "BlockAllocator: free queue and reference counts", 10),
        ("6.2", "Block tables and the slot mapping", 8, "6.1"),
        ("6.3", "PagedKVCache: scatter and gather through blocks", 9, "6.1 6.2"),
        ("6.4", "Paged attention in PyTorch", 15, "6.1 6.2 6.3"),
        ("6.5", "A Triton paged-decode kernel", 15, "6.2 6.4"),
        ("6.6", "Prefix caching: chained hashes, LRU reuse", 15, "6.1 6.2"),
        ("6.7", "Fork and copy-on-write", 10, "6.1 6.2 6.3"),
        ("6.8", "The engine on paged memory: block manager, parallel sampling", 18, "6.1 6.2 6.3 6.4 6.6 6.7"),
        # going further: the production-style decode kernel, with 6.5's textbook kernel as its first step
        ("6.9", "Going further: a split-K (flash-decoding) paged-decode kernel", 15, "6.4 6.5"),
    )),
    # --- end stage 06 ---------------------------------------------------------------
    # --- stage 07 -------------------------------------------------------------------
    # Every answer over HTTP passes 7.1 (the budget), 7.2 (admit), 7.4 (the disconnect watch),
    # 7.5 (the bridge) and 7.6 (the log line), so their HTTP tests need each other: a cycle
    # `requires` cannot hold. Each declares those before it in 7.1, 7.5, 7.2, 7.4, 7.6; the
    # rest shows up as "blocked by" when a test stops at that TODO (7.6's held-out abort
    # test also needs 7.3's deadlines).
    Stage("07", "server", "07_serving", "Serving: an OpenAI-compatible HTTP server", _ex(
        ("7.1", "The token budget: n and max_tokens against the context", 5),
        ("7.2", "Admission control by KV blocks: 503 + Retry-After", 15, "7.1 7.5"),
        ("7.3", "Deadlines: first token and total", 10, "7.1 7.2 7.4 7.5 7.6"),
        ("7.4", "Cancellation: the disconnect watch and the race against it", 15, "7.1 7.2 7.5"),
        ("7.5", "The streaming bridge and SSE framing", 15, "7.1"),
        ("7.6", "Metrics and the per-request log line", 15, "7.1 7.2 7.4 7.5"),
        ("7.7", "Graceful shutdown", 15, "7.1 7.2 7.4 7.5 7.6"),
        ("7.8", "Priority lanes: short requests first, none starved", 10),
    )),
    # --- end stage 07 ---------------------------------------------------------------
    # --- stage 08 -------------------------------------------------------------------
    Stage("08", "profiling", "08_profiling", "Profiling the whole stack", _ex(
        ("8.1", "Honest timers: warm-up, repeats, sync", 10),
        ("8.2", "torch.profiler around engine steps", 20),
        ("8.3", "Memory accounting", 15),
        ("8.4", "Throughput vs batch, and the knee", 15, "8.1"),
        ("8.5", "The roofline: FLOPs, bytes, regime", 20, "8.1"),
        ("8.6", "Request latency and the next change", 15),
        ("8.7", "The profile report", 5, "8.1 8.3 8.4 8.6"),
    )),
    # --- end stage 08 ---------------------------------------------------------------
)


def stage(key: str) -> Stage:
    """Find a stage by number ("1", "01"), module ("autograd") or folder ("01_autograd")."""
    k = str(key).strip().rstrip("/")
    for s in STAGES:
        if k in (s.number, s.module, s.folder) or (k.isdigit() and int(k) == int(s.number)):
            return s
    known = ", ".join(f"{s.number} ({s.module})" for s in STAGES)
    raise KeyError(f"no stage {key!r}; the course has: {known}")


def exercise(ex_id: str) -> Exercise:
    for s in STAGES:
        for e in s.exercises:
            if e.id == ex_id:
                return e
    raise KeyError(f"no exercise {ex_id!r} in the manifest")


def stage_of(ex_id: str) -> Stage:
    for s in STAGES:
        if any(e.id == ex_id for e in s.exercises):
            return s
    raise KeyError(f"no exercise {ex_id!r} in the manifest")
