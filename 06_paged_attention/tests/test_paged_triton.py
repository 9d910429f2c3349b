"""Exercise 6.5: the Triton paged-decode kernel gives `paged_attention`'s numbers.

On the CPU it runs in Triton's interpreter, which must be switched on (TRITON_INTERPRET=1)
before triton is first imported; the rest of the suite may already have imported it in
this process, so the cases run in a fresh Python process (`triton_cases.py`), once per
module, and a pool too large for int32 offsets (4 GiB of address space, almost none of it
backed) read through an int32 block table. Two cases are grouped-query pools (issue 30):
SmolLM2-135M's shapes (9 query heads on 3 K/V heads of 64, blocks of 16) and 8 heads on 2
(a group of 4, not the K/V heads' count), where query head h reads K/V head h // GROUP. On
a CUDA machine the `gpu` tests run the compiled kernel here, including such a pool."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import course
from course import loader

p = course.load("paged")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import triton_cases  # noqa: E402

needs_triton = pytest.mark.skipif(not p.HAS_TRITON, reason="triton is not installed (it installs on Linux x86-64 only)")


def start_interpreted(cases=None, module=triton_cases) -> subprocess.Popen:
    """Start the cases (default: module.CASES; the module: triton_cases, or split_cases for
    6.9) under TRITON_INTERPRET=1 in a fresh process."""
    env = dict(os.environ, TRITON_INTERPRET="1", COURSE_IMPL=loader.current_impl(), OMP_NUM_THREADS="1")
    argv = [] if cases is None else [json.dumps(cases)]
    return subprocess.Popen([sys.executable, str(module.__file__), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env,
                            cwd=str(loader.root()))


def finish_interpreted(proc: subprocess.Popen, cases=None, module=triton_cases) -> dict[str, dict]:
    """Wait for a run `start_interpreted` began; its result rows by case name. A run that
    crashed or left a case out fails here, naming the missing cases (not a KeyError later)."""
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the interpreter run did not finish within 240 s")
    results = {}
    for line in out.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            results[row["case"]] = row
    missing = [c[0] for c in (module.CASES if cases is None else cases) if c[0] not in results]
    if missing or (proc.returncode != 0 and (cases is not None or module.BIG in results)):
        pytest.fail(f"the interpreter run ended with exit {proc.returncode} without a result for "
                    f"{missing or 'no case'}:\n{err[-3000:]}")
    if cases is None and module.BIG not in results:  # the last case crashed the process
        results[module.BIG] = {"case": module.BIG, "crashed": f"exit {proc.returncode}", "trace": err[-2000:]}
    return results


def run_interpreted(cases=None, module=triton_cases) -> dict[str, dict]:
    """Run cases (default: module.CASES) under TRITON_INTERPRET=1 in a fresh process."""
    return finish_interpreted(start_interpreted(cases, module), cases, module)


class SharedRun:
    """A module's one interpreter run of `module`'s cases: started when the tests are
    collected (the stage's conftest calls the module's `start_interpreted_early`), so that
    its start-up (importing torch and triton: ~2 s, far more on a loaded machine) overlaps
    the other tests instead of being charged to the first case's time limit; and its
    outcome, failure included, is shared by every case. (A fixture interrupted by the
    per-test time limit is not cached by pytest: each later case would start the run again
    under a fresh limit, so which cases failed depended on the machine's load.)"""

    def __init__(self, module=triton_cases):
        self.module, self.state = module, {}

    def start_early(self) -> None:
        if "proc" not in self.state and p.HAS_TRITON:
            self.state["proc"] = start_interpreted(module=self.module)
            atexit.register(self.stop)

    def stop(self) -> None:
        proc = self.state.get("proc")
        if isinstance(proc, subprocess.Popen) and proc.poll() is None:
            proc.kill()
            proc.wait()

    def results(self) -> dict[str, dict]:
        if "failed" in self.state:
            pytest.fail(f"the shared interpreter run failed earlier: {self.state['failed']}")
        if "results" not in self.state:
            if "proc" not in self.state:
                self.state["proc"] = start_interpreted(module=self.module)
            try:
                self.state["results"] = finish_interpreted(self.state["proc"], module=self.module)
            except BaseException as e:  # a failure, or the time limit's alarm: every case reports it
                self.stop()
                self.state["failed"] = f"{type(e).__name__}: {e}"
                raise
        return self.state["results"]


_RUN = SharedRun()
start_interpreted_early = _RUN.start_early


@pytest.fixture(scope="module")
def interpreted() -> dict[str, dict]:
    """Every case of triton_cases.py, run in the interpreter once for the module."""
    return _RUN.results()


def check(row: dict, atol: float) -> None:
    if "error" in row:
        if row["error"].startswith("NotImplementedError"):
            raise NotImplementedError(row["error"].split(": ", 1)[1])
        pytest.fail(f"{row['case']}: {row['error']}\n{row.get('trace', '')}")
    assert row["finite"], f"{row['case']}: the kernel read a stale (NaN) slot past a sequence's length"
    assert row["max_err"] <= atol, f"{row['case']}: differs from paged_attention by {row['max_err']:.2e}"


@pytest.mark.exercise("6.5")
@needs_triton
@pytest.mark.parametrize("case", [c[0] for c in triton_cases.CASES])
def test_kernel_equals_paged_attention_in_the_interpreter(interpreted, case):
    check(interpreted[case], atol=1e-5)


WIDEN = ("block ids must be widened to int64 before they multiply the block stride: in a pool of "
         "more than 2**31 elements, block id x stride overflows int32 (block tables may be int32)")


@pytest.mark.exercise("6.5")
@needs_triton
def test_kernel_widens_block_ids_past_int32_offsets_in_the_interpreter(interpreted):
    """A float16 pool of 2**31 + 64 elements (4 GiB of address space, a few pages of it
    touched) read through an int32 block table: the last block's offset passes 2**31."""
    check_big(interpreted[triton_cases.BIG])


def check_big(row: dict) -> None:
    """The case `BIG`'s row (of triton_cases or split_cases) holds the right answer."""
    if "unavailable" in row:
        pytest.skip(row["unavailable"])
    if "crashed" in row:
        pytest.fail(f"{row['case']}: the kernel crashed the process ({row['crashed']}), reading far outside "
                    f"the pool: {WIDEN}")
    if "error" in row and row["error"].startswith("NotImplementedError"):
        raise NotImplementedError(row["error"].split(": ", 1)[1])
    assert "error" not in row, f"{row['case']}: {row.get('error')}\n{row.get('trace', '')}"
    assert row["finite"] and row["max_err"] <= 2e-3, f"{row['case']}: differs by {row['max_err']:.2e}: {WIDEN}"


@pytest.mark.exercise("6.5")
@needs_triton
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("case", [c[0] for c in triton_cases.CASES])
def test_kernel_on_the_gpu(case, dtype):
    row = triton_cases.run_case(p, next(c for c in triton_cases.CASES if c[0] == case), device="cuda", dtype=dtype)
    check(row, atol=1e-5 if dtype == torch.float32 else 2e-3)


@pytest.mark.exercise("6.5")
@needs_triton
@pytest.mark.gpu
def test_kernel_on_a_pool_past_int32_offsets():
    """A pool of more than 2**31 elements: a block id times the block stride overflows int32."""
    H, D, bs = 1, 128, 16
    num_blocks = 2**31 // (bs * H * D) + 64
    k = torch.zeros(num_blocks, bs, H, D, dtype=torch.float16, device="cuda")
    v = torch.zeros_like(k)
    last = num_blocks - 1
    k[last].normal_()
    v[last].normal_()
    q = torch.randn(1, H, 1, D, dtype=torch.float16, device="cuda")
    tables = torch.tensor([[last]], device="cuda")
    q_pos = torch.tensor([[bs - 1]], device="cuda")
    got = p.paged_decode_triton(q, k, v, tables, q_pos)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k[last].float().transpose(0, 1)[None], v[last].float().transpose(0, 1)[None])
    torch.testing.assert_close(got.float(), want, atol=2e-3, rtol=2e-3, msg=lambda m: f"{WIDEN}: {m}")
    del k, v
    torch.cuda.empty_cache()


@pytest.mark.exercise("6.8")
@pytest.mark.gpu
def test_paged_engine_on_cuda_matches_the_contiguous_engine():
    """The whole engine on the GPU (attention through the Triton kernel for decode)."""
    from solutions.batching import ContinuousBatching, Engine, ManualClock, replay
    from solutions.gpt import random_gpt
    from solutions.workload import make_trace

    model = random_gpt(48, dtype=torch.float32).cuda()  # the CPU tests' model (conftest.CONTEXT), in fp32
    trace = make_trace(12, profile="mix", seed=4, short_prompt=(2, 10), long_prompt=(14, 26),
                       short_output=(2, 8), long_output=(8, 16))
    outs = []
    for make in (lambda c: Engine(model, ContinuousBatching(4), clock=c),
                 lambda c: p.PagedEngine(model, ContinuousBatching(4), block_size=5, num_blocks=30, clock=c)):
        clock = ManualClock()
        outs.append([r.output for r in replay(make(clock), trace, sleep=clock.sleep, step_time=0.01).requests])
    assert outs[0] == outs[1]
