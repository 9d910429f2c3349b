"""Exercise 3.11: data parallel training with torch.distributed (gloo, CPU) under torchrun.

Two processes with gradient accumulation A must give the loss curve of one process with
accumulation 2A: both see the same global batch and average the same gradients; only the
order of floating-point additions differs (all-reduce vs local sums). Tolerance: 1e-4
absolute on losses of about 2-6 nats after 8 AdamW steps in float32.

A = 2, not 1: with one micro-batch the first is the last, so a step that all-reduces on the
FIRST micro-batch (`grad_sync(model, i == 0)`, leaving the later ones' gradients local to
each process) would pass. With two, only the sync on the last micro-batch matches.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

import pytest
import torch

import course

train = course.load("train")

TOLERANCE = 1e-4


@pytest.mark.exercise("3.11")
def test_shard_batch_partitions_the_global_batch():
    x = torch.arange(12 * 3).view(12, 3)
    y = x + 1
    for world in (1, 2, 3, 4):
        shards = [train.shard_batch(x, y, r, world) for r in range(world)]
        assert all(sx.shape == (12 // world, 3) for sx, _ in shards)
        assert torch.equal(torch.cat([sx for sx, _ in shards]), x)  # disjoint, in order, complete
        assert torch.equal(torch.cat([sy for _, sy in shards]), y)
    with pytest.raises(ValueError):
        train.shard_batch(x, y, 0, 5)  # 12 rows do not split over 5
    with pytest.raises(ValueError):
        train.shard_batch(x, y, 2, 2)


@pytest.mark.exercise("3.11")
def test_single_process_needs_no_process_group():
    assert train.setup_distributed() == (0, 1)
    assert not torch.distributed.is_initialized()
    value = torch.tensor(2.5)
    assert train.all_reduce_mean(value) is value
    train.shard_batch(torch.zeros(4, 2), torch.zeros(4, 2), 1, 2)  # (and the exercise is done)


def _write_corpus(folder):
    docs = [f"def f{i}(a, b):\n    '''Add {i}.'''\n    return a + b * {i}\n" * (1 + i % 4) for i in range(120)]
    for name, part in (("train", docs[:100]), ("val", docs[100:])):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for i, text in enumerate(part):
                f.write(json.dumps({"id": f"{name}{i}", "text": text, "source": "test"}) + "\n")


STEPS = 8


def ddp_args(folder, steps: int = STEPS) -> list[str]:
    """The training command's arguments (after the script) for 2 x 2 micro-batches."""
    return ["--preset", "tiny", "--data", str(folder), "--steps", str(steps), "--grad-accum", "2",
            "--history", str(folder / "ddp.json"), "--out", str(folder / "ddp.pt"), "--no-progress", "--threads", "1"]


def compare_with_one_process(folder, ddp: dict, steps: int = STEPS) -> None:
    """2 processes x 2 micro-batches (`ddp`, the run's history) against 1 process x 4, here."""
    cfg = replace(train.PRESETS["tiny"], steps=steps, grad_accum=4)
    tokens = train.load_tokens(folder / "train.jsonl"), train.load_tokens(folder / "val.jsonl")
    _, single = train.train(cfg, *tokens, progress=False)

    assert ddp["step"] == single["step"] == list(range(1, steps + 1))
    assert ddp["tokens"] == single["tokens"]  # the same global batch size
    diffs = [abs(a - b) for a, b in zip(ddp["loss"], single["loss"])]
    assert max(diffs) < TOLERANCE, (
        "2 processes x 2 micro-batches must match 1 process x 4 (all-reduce once, on the LAST "
        f"micro-batch); losses (ddp, single): {list(zip(ddp['loss'], single['loss']))}")
    assert abs(ddp["val_loss"][-1] - single["val_loss"][-1]) < TOLERANCE
    assert single["loss"][-1] < single["loss"][0]  # and it trained


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_ranks(args: list[str], folder, timeout: float = 150.0) -> None:
    """The training command's `main(args)` in two processes forked from this one, each with
    the environment `torchrun --standalone --nproc_per_node 2` gives its workers (RANK,
    LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...): torchrun's contract without its
    three new interpreters (seconds of imports each). The real torchrun run: the held-out
    test_two_processes_under_torchrun_match_one_process_with_twice_the_accumulation."""
    import importlib
    import signal
    import time

    main = importlib.import_module(f"{train.__name__}.cli").main
    port, pids, logs = _free_port(), [], [folder / f"rank{r}.log" for r in (0, 1)]
    for rank in (0, 1):
        pid = os.fork()
        if pid == 0:  # the child: one rank, its output in its log; never returns into pytest
            code = 3
            try:
                fd = os.open(logs[rank], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank),
                                  WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", ROLE_WORLD_SIZE="2",
                                  MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                                  TORCHELASTIC_RUN_ID="course-test")
                torch.set_num_threads(1)
                code = int(main(args) or 0)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    codes, end = {}, time.monotonic() + timeout
    while len(codes) < 2 and time.monotonic() < end:
        for pid in pids:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    for pid in pids:
        if pid not in codes:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            codes[pid] = f"killed after {timeout:g} s"
    out = "\n".join(f"rank {r}: exit {codes[pid]}\n{logs[r].read_text(errors='replace')[-2000:]}"
                     for r, pid in enumerate(pids))
    assert all(codes[pid] == 0 for pid in pids), out


@pytest.mark.exercise("3.11")
def test_two_processes_match_one_process_with_twice_the_accumulation(tmp_path, one_thread):
    """(One torch thread here, as each rank has: on a busy machine a second thread's idle
    spinning takes the cores the work needs.)"""
    train.shard_batch(torch.zeros(4, 2), torch.zeros(4, 2), 1, 2)  # fail fast while 3.11 is a stub
    _write_corpus(tmp_path)
    run_two_ranks(ddp_args(tmp_path), tmp_path)
    compare_with_one_process(tmp_path, json.loads((tmp_path / "ddp.json").read_text()))
