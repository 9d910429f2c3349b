"""A small mutation check: plausible learner bugs, each applied to a copy of a reference
solution, must make some exercise test of that stage fail.

Each mutation replaces one snippet of the package `solutions/<module>/` (it must occur
exactly once across its files) and writes the result as the "learner's" package of a
throwaway course root; the stage's
named test files then run against it in a subprocess (`--impl student` with `COURSE_ROOT`
pointing at the copy, so `course.load` picks up the mutant). The run must end with a
failing test (exit status 1), not a collection error, and not a TODO (that would mean the
real stub was loaded instead of the mutant).

The bugs are the ones a learner writes (off-by-one bounds, a wrong axis, a step done at the
wrong time), among them those that issue 14 found surviving the stage tests (temperature
after the nucleus, DDP synchronised on the first micro-batch, no evaluation after the last
step, admission in a step that preempted, quality bounds off by one, a batched matmul whose
second operand broadcasts, bits per byte counting end-of-text). When a solution is
rewritten so that a snippet no longer occurs, update the snippet here, keeping the bug.
Only the tests that should catch a bug run, with `-x`: the whole check costs about 40 s of
CPU (the DDP run, two processes, is most of it); wall time grows with the machine's load.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from course import layout, manifest
from tests.helpers import ROOT


@dataclass(frozen=True)
class Mutation:
    id: str
    module: str  # "autograd", ...
    old: str  # a snippet of the package solutions/<module>/, occurring exactly once in it
    new: str
    tests: tuple[str, ...]  # test files or node ids (relative to the stage folder) that must catch it
    more: tuple[tuple[str, str], ...] = ()  # further (old, new) edits of the same mutation

    @property
    def edits(self) -> tuple[tuple[str, str], ...]:
        return ((self.old, self.new), *self.more)


M = Mutation
MUTATIONS = (
    # ------------------------------------------------------------------ stage 01
    M("01-matmul-second-operand-batch-not-unbroadcast", "autograd",
      "gb = _unbroadcast(np.swapaxes(a.data, -1, -2) @ g, b.shape)",
      "gb = np.swapaxes(a.data, -1, -2) @ g",
      ("tests/test_autograd_matmul_broadcast.py",)),
    M("01-unbroadcast-forgets-size-one-axes", "autograd",
      "    axes = tuple(range(lead)) + tuple(\n"
      "        lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1)",
      "    axes = tuple(range(lead))",
      ("tests/test_autograd_ops.py::test_binary_ops_broadcast_both_ways",)),
    M("01-backward-forward-order", "autograd",
      "for node in reversed(topological_order(self)):",
      "for node in topological_order(self):",
      ("tests/test_autograd_backward.py::test_diamond",)),
    M("01-indexing-assigns-instead-of-accumulating", "autograd",
      "                np.add.at(full, index, g)",
      "                full[index] = g",
      ("tests/test_autograd_ops.py::test_repeated_index_gradient_counts_each_pick",)),
    M("01-max-ties-not-shared", "autograd",
      "return (winners * (g / ties),)",
      "return (winners * g,)",
      ("tests/test_autograd_ops.py::test_max_splits_the_gradient_between_ties",)),
    # ------------------------------------------------------------------ stage 02
    M("02-too-short-off-by-one", "dedup",
      "if n < config.min_chars:", "if n <= config.min_chars:",
      ("tests/test_dedup_quality_limits.py",)),
    M("02-long-line-off-by-one", "dedup",
      "> config.max_line_chars:", ">= config.max_line_chars:",
      ("tests/test_dedup_quality_limits.py",)),
    M("02-char-shingles-drop-the-last", "dedup",
      "return {text[i:i + k] for i in range(len(text) - k + 1)}",
      "return {text[i:i + k] for i in range(len(text) - k)}",
      ("tests/test_dedup_minhash.py::test_char_shingles_examples",)),
    M("02-labels-are-roots-not-smallest-members", "dedup",
      "        return smallest[roots]",
      "        return roots",
      ("tests/test_dedup_lsh.py::test_union_returns_false_inside_a_set_and_labels_are_order_free",)),
    # ------------------------------------------------------------------ stage 03
    M("03-ddp-sync-on-the-first-micro-batch", "train",
      "with grad_sync(model, enabled=i == n - 1):",
      "with grad_sync(model, enabled=i == 0):",
      ("tests/test_train_ddp.py::test_two_processes_match_one_process_with_twice_the_accumulation",)),
    M("03-engine-loop-no-eval-after-the-last-step", "train",
      "if (step + 1) % eval_every == 0 or step + 1 == steps:",
      "if (step + 1) % eval_every == 0:",
      ("tests/test_train_last_step.py::test_engine_loop_evaluates_after_the_last_step",)),
    M("03-bits-per-byte-counts-end-of-text", "train",
      "byte_targets += int((y != EOT).sum())",
      "byte_targets += y.numel()",
      ("tests/test_train_last_step.py::test_bits_per_byte_divides_by_byte_targets_only",)),
    M("03-accumulation-without-dividing-by-A", "train",
      "(loss / n).backward()",
      "loss.backward()",
      ("tests/test_train_gpt_loop.py::test_accumulation_equals_one_big_batch",)),
    M("03-adamw-without-bias-correction", "train",
      "p.data -= self.lr * (m / correction1) / (np.sqrt(v / correction2) + self.eps)",
      "p.data -= self.lr * m / (np.sqrt(v) + self.eps)",
      ("tests/test_train_optim.py::test_adamw_bias_correction_and_decoupled_decay",)),
    M("03-warmup-starts-at-zero", "train",
      "return max_lr * (step + 1) / warmup_steps",
      "return max_lr * step / warmup_steps",
      ("tests/test_train_optim.py::test_schedule_matches_torch_linear_then_cosine",)),
    # ------------------------------------------------------------------ stage 04
    M("04-temperature-after-the-nucleus", "kv_cache",
      "    logits = logits.float() / temperature\n",
      "    logits = logits.float()\n",
      ("tests/test_kv_cache_sampling_order.py",),
      more=(("    probs = logits.softmax(dim=-1)\n    return torch.multinomial",
             "    probs = (logits / temperature).softmax(dim=-1)\n    return torch.multinomial"),)),
    M("04-top-k-keeps-every-tie", "kv_cache",
      "        logits = torch.full_like(logits, float(\"-inf\")).scatter_(-1, top.indices, top.values)",
      "        logits = logits.masked_fill(logits < top.values[:, [-1]], float(\"-inf\"))",
      ("tests/test_kv_cache_generate.py::test_top_k_and_top_p_together_and_per_row",)),
    M("04-top-p-drops-the-token-that-reaches-p", "kv_cache",
      "drop_sorted = mass_before >= top_p",
      "drop_sorted = probs.cumsum(dim=-1) >= top_p",
      ("tests/test_kv_cache_generate.py::test_top_p_keeps_the_smallest_set_reaching_p",)),
    M("04-mask-hides-the-token-itself", "kv_cache",
      "mask = (torch.arange(length, device=device) <= (start[:, None] + t)[:, :, None])[:, None]",
      "mask = (torch.arange(length, device=device) < (start[:, None] + t)[:, :, None])[:, None]",
      ("tests/test_kv_cache_attention.py::test_chunked_prefill_equals_an_unchunked_run",)),
    M("04-int8-scale-of-255-steps", "kv_cache",
      "scale = x.abs().amax(dim=-1, keepdim=True).float() / 127.0",
      "scale = x.abs().amax(dim=-1, keepdim=True).float() / 255.0",
      ("tests/test_kv_cache_caches.py::test_quantize_int8_round_trip_is_within_half_a_step",)),
    # ------------------------------------------------------------------ stage 05
    M("05-admits-in-the-step-that-preempted", "batching",
      "            self.preempt(now, out)\n        else:\n            self.admit_fcfs(now, out)",
      "            self.preempt(now, out)\n        self.admit_fcfs(now, out)",
      ("tests/test_batching_no_admission_on_preemption.py::test_the_step_that_preempts_admits_nobody",)),
    M("05-preempts-the-earliest-arrival", "batching",
      "victim = max(self.running, key=lambda r: r.order)",
      "victim = min(self.running, key=lambda r: r.order)",
      ("tests/test_batching_preemption.py::test_the_latest_arrival_is_preempted_and_requeued",)),
    M("05-dynamic-batch-full-off-by-one", "batching",
      "if len(self.waiting) >= self.max_batch_size:",
      "if len(self.waiting) > self.max_batch_size:",
      ("tests/test_batching_full_batch.py",)),
    M("05-prompt-chunks-before-decodes", "batching",
      "for r in decoding + prefilling:",
      "for r in prefilling + decoding:",
      ("tests/test_batching_chunked.py::test_decodes_come_before_prompt_chunks",)),
    M("05-tpot-divides-by-all-tokens", "batching",
      "tpot=(times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None,",
      "tpot=(times[-1] - times[0]) / len(times) if len(times) > 1 else None,",
      ("tests/test_batching_metrics.py::test_request_metrics_from_its_timestamps",)),
)


def _stage(module: str) -> manifest.Stage:
    return manifest.stage(module)


# The runner: one process imports pytest, torch, NumPy, Hypothesis once, then forks a child
# per mutation that runs pytest on the mutant (a fresh pytest per child; nothing of a child
# survives into the next). That saves the few seconds of imports each mutation would cost.
# The children load only the plugins the stage tests need (not nbval, whose imports alone
# take seconds) and run Hypothesis without shrinking: a failure is all that is asked.
_PRELOAD = ("numpy", "torch", "torch.nn.functional", "hypothesis", "hypothesis.extra.numpy",
            "datasketch", "solutions.gpt", "solutions.tokenizer", "solutions.autograd",
            "solutions.kv_cache", "solutions.workload")


def _run_jobs(jobs: list[dict]) -> list[dict]:
    import importlib
    import pytest as _pytest  # noqa: F401  (imported before forking)

    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    results = []
    for job in jobs:
        log = job["log"]
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # the child: run pytest on the mutant, exit with its status
            code = 3
            try:
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.environ.update(COURSE_ROOT=job["root"], COURSE_IMPL="student", COURSE_NO_RECORD="1",
                                  PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
                import pytest as child_pytest
                from hypothesis import Phase, settings

                # a failing example is enough: no shrinking (it can take far longer than finding)
                settings.register_profile("mutants", phases=(Phase.explicit, Phase.generate),
                                          database=None, derandomize=True)
                settings.load_profile("mutants")
                code = int(child_pytest.main([
                    "-p", "course.pytest_plugin", "-p", "pytest_timeout", "--impl", "student",
                    "-x", "-q", "--no-header", "-p", "no:cacheprovider", "-m", "exercise", *job["files"]]))
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        results.append({"id": job["id"], "returncode": os.waitstatus_to_exitcode(status),
                        "seconds": round(time.perf_counter() - started, 2)})
    return results


def _package(st: manifest.Stage) -> dict[str, str]:
    """{file name: text} of the stage's reference package."""
    return {p.name: p.read_text(encoding="utf-8") for p in layout.solution_files(st)}


def _count(sources: dict[str, str], snippet: str) -> int:
    return sum(text.count(snippet) for text in sources.values())


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple[int, str]]:
    """Run every mutation once (one runner process); {id: (exit status, output)}."""
    base = tmp_path_factory.mktemp("mutants")
    jobs = []
    for k, mut in enumerate(MUTATIONS):
        st = _stage(mut.module)
        sources = _package(st)
        if any(_count(sources, old) != 1 for old, _ in mut.edits):
            continue  # reported by the test itself
        for old, new in mut.edits:
            name = next(n for n, text in sources.items() if old in text)
            sources[name] = sources[name].replace(old, new)
        root = base / f"m{k}"
        (root / st.folder / st.module).mkdir(parents=True)
        for name, text in sources.items():
            (root / st.folder / st.module / name).write_text(text, encoding="utf-8")
        jobs.append({"id": mut.id, "root": str(root), "log": str(root / "pytest.log"),
                     "files": [str(ROOT / st.folder / f) for f in mut.tests]})
    spec = base / "jobs.json"
    spec.write_text(json.dumps(jobs), encoding="utf-8")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "-m", "tests.test_mutations", str(spec)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"the mutation runner failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    done = {r["id"]: r["returncode"] for r in json.loads(proc.stdout.strip().splitlines()[-1])}
    return {job["id"]: (done[job["id"]], open(job["log"], encoding="utf-8", errors="replace").read())
            for job in jobs}


# The first test pays for the whole run (the module fixture): about a minute on 2 idle cores,
# a few on a busy machine; more than pytest's default per-test limit allows.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mut", [pytest.param(m, id=m.id) for m in MUTATIONS])
def test_mutation_is_caught(mut: Mutation, outcomes):
    st = _stage(mut.module)
    sources = _package(st)
    for old, _ in mut.edits:
        count = _count(sources, old)
        assert count == 1, (f"mutation {mut.id}: its snippet occurs {count} times in solutions/{st.module}/ "
                            f"(must be once); update tests/test_mutations.py to the solution's new text:\n{old}")
    code, out = outcomes[mut.id]
    assert "TODO: Exercise" not in out, f"mutation {mut.id}: the stub ran instead of the mutant:\n{out[-3000:]}"
    assert code == 1, f"mutation {mut.id} survived {', '.join(mut.tests)} (exit {code}):\n{out[-3000:]}"


if __name__ == "__main__":  # the runner (see `outcomes`): python -m tests.test_mutations JOBS.json
    print(json.dumps(_run_jobs(json.loads(open(sys.argv[1], encoding="utf-8").read()))))
