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
import subprocess
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


@pytest.mark.exercise("3.11")
def test_two_processes_match_one_process_with_twice_the_accumulation(tmp_path):
    train.shard_batch(torch.zeros(4, 2), torch.zeros(4, 2), 1, 2)  # fail fast while 3.11 is a stub
    _write_corpus(tmp_path)
    steps = 8
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           os.path.dirname(train.__file__), "--preset", "tiny", "--data", str(tmp_path), "--steps", str(steps),
           "--grad-accum", "2", "--history", str(tmp_path / "ddp.json"), "--out", str(tmp_path / "ddp.pt"),
           "--no-progress", "--threads", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ddp = json.loads((tmp_path / "ddp.json").read_text())

    cfg = replace(train.PRESETS["tiny"], steps=steps, grad_accum=4)
    tokens = train.load_tokens(tmp_path / "train.jsonl"), train.load_tokens(tmp_path / "val.jsonl")
    _, single = train.train(cfg, *tokens, progress=False)

    assert ddp["step"] == single["step"] == list(range(1, steps + 1))
    assert ddp["tokens"] == single["tokens"]  # the same global batch size
    diffs = [abs(a - b) for a, b in zip(ddp["loss"], single["loss"])]
    assert max(diffs) < TOLERANCE, (
        "2 processes x 2 micro-batches must match 1 process x 4 (all-reduce once, on the LAST "
        f"micro-batch); losses (ddp, single): {list(zip(ddp['loss'], single['loss']))}")
    assert abs(ddp["val_loss"][-1] - single["val_loss"][-1]) < TOLERANCE
    assert single["loss"][-1] < single["loss"][0]  # and it trained
