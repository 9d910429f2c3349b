"""Killing a run midway loses nothing: the previous outputs are still there, whole and valid.

Each test makes a finished run's outputs, starts a second run of the real command line as
a subprocess, waits until it has started writing, kills it with SIGKILL (no cleanup code
runs), and checks that every previous output is byte-for-byte unchanged and still valid
(dedup: its report accounts for every input line; training: the checkpoints load and
verify). The next run then cleans up what the killed one left.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from solutions import dedup as dd
from solutions import fileio
from solutions import train as tr
from solutions.gpt import GPT, load_checkpoint, save_checkpoint
from tests.helpers import ROOT

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _corpus(path: Path, n: int, seed: int) -> Path:
    """n documents of random words; every 10th is a copy of an earlier one, every 7th too short."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(5000)])
    texts = [" ".join(vocab[rng.integers(0, 5000, 80)]) for _ in range(n)]
    with open(path, "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            text = texts[i // 2] if i % 10 == 9 else "short" if i % 7 == 6 else text
            f.write(json.dumps({"id": f"d{i}", "text": text, "source": f"p{i % 50}/m{i}.txt"}) + "\n")
    return path


def _start(args: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_WAIT_POLICY="PASSIVE")
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 90.0, then: float = 0.0) -> None:
    """SIGKILL `proc` once `ready()` is true (plus `then` seconds); it must still be running."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"the run ended before it could be killed:\n{proc.stdout.read()[-2000:]}"
        assert time.monotonic() < deadline, "the run never started writing"
        time.sleep(0.01)
    time.sleep(then)
    assert proc.poll() is None, "the run ended before it could be killed; give it more work"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()


def test_killed_dedup_run_leaves_the_previous_outputs(tmp_path):
    small = _corpus(tmp_path / "small.jsonl", 60, seed=1)
    big = _corpus(tmp_path / "big.jsonl", 30000, seed=2)
    out = tmp_path / "out"
    first = dd.run_pipeline(small, out, dd.PipelineConfig(num_perm=32), progress=False)
    assert dd.accounted(first) == first["input_lines"] == 60
    before = _hashes(out)

    proc = _start(["-m", "solutions.dedup", str(big), str(out), "--num-perm", "32", "--no-progress"])

    def writing() -> bool:  # its temporary folder exists and removed.jsonl is open in it
        return any((p / "removed.jsonl").exists() for p in out.glob(".partial-*"))

    _kill_when(proc, writing, then=0.2)
    assert _hashes(out) == before  # every previous output unchanged, byte for byte
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    kept = sum(len((out / f"{s}.jsonl").read_text(encoding="utf-8").splitlines()) for s in dd.SPLITS)
    removed = len((out / "removed.jsonl").read_text(encoding="utf-8").splitlines())
    assert report["input_lines"] == 60 == kept + removed + report["malformed"]
    assert list(out.glob(".partial-*"))  # the killed run's temporary folder (no cleanup ran)

    again = dd.run_pipeline(small, out, dd.PipelineConfig(num_perm=32), progress=False)  # and recovers
    assert not list(out.glob(".partial-*")) and not list(tmp_path.glob(".partial-*"))
    assert dd.accounted(again) == again["input_lines"] == 60
    assert _hashes(out).keys() == before.keys()


def _tiny_data(folder: Path) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, n in (("train", 200), ("val", 20)):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for i in range(n):
                text = "".join(rng.choice(list("abcdefgh ():\n"), 400))
                f.write(json.dumps({"id": f"{name}{i}", "text": text, "source": "t"}) + "\n")
    return folder


def test_killed_training_run_leaves_the_previous_checkpoints(tmp_path):
    data = _tiny_data(tmp_path / "data")
    steps = 100_000  # far more than the run gets to do before it is killed
    cfg = replace(tr.PRESETS["tiny"], steps=steps, warmup_steps=tr.PRESETS["tiny"].warmup_steps)
    tokens = tr.load_tokens(data / "train.jsonl"), tr.load_tokens(data / "val.jsonl")
    state, model_path = tmp_path / "state.pt", tmp_path / "model.pt"
    model, _ = tr.train(cfg, *tokens, state_path=state, stop_after=2, progress=False)
    save_checkpoint(model, model_path)
    before = _hashes(tmp_path)

    proc = _start(["-m", "solutions.train", "--preset", "tiny", "--data", str(data), "--steps", str(steps),
                   "--state", str(state), "--resume", "--out", str(model_path), "--no-progress", "--threads", "1"])
    lines: list[str] = []

    def training() -> bool:  # it printed its plan: the data is loaded and the loop is starting
        lines.append(proc.stdout.readline())
        return lines[-1].startswith("tiny:")

    _kill_when(proc, training, then=1.0)
    assert _hashes(tmp_path) == before
    fresh = GPT(cfg.model)
    step, history = tr.load_training_state(state, model=fresh, optimizer=tr.make_optimizer(fresh, cfg),
                                           data_rng=torch.Generator(), config=tr.asdict(cfg))
    assert step == 2 and history["step"] == [1, 2]
    assert load_checkpoint(model_path)[0].config == cfg.model


def test_a_write_killed_halfway_leaves_the_old_file(tmp_path):
    target = tmp_path / "result.txt"
    target.write_text("the previous result\n")
    code = ("import sys, time; from solutions.fileio import atomic_write\n"
            f"with atomic_write({str(target)!r}) as f:\n"
            "    f.write('half of the new result'); f.flush(); print('writing', flush=True); time.sleep(60)\n")
    proc = _start(["-c", code])
    _kill_when(proc, lambda: proc.stdout.readline().startswith("writing"))
    assert target.read_text() == "the previous result\n"
    leftovers = list(tmp_path.glob(".partial-*"))
    assert len(leftovers) == 1 and leftovers[0].read_text() == "half of the new result"
    fileio.remove_stale_partials(tmp_path)  # its writer is dead: the next run removes it
    assert [p.name for p in tmp_path.iterdir()] == ["result.txt"]


def test_bench_report_draws_the_plot_atomically(tmp_path):
    import argparse

    from course.benchmark import Report

    path = tmp_path / "bench.png"
    rep = Report("00_test", argparse.Namespace(json=str(tmp_path / "b.json"), plot=str(path)), title="t")
    rep.add("ours", ms=1.5, ratio=2.0)
    rep.add("theirs", ms=3.0)
    rep.finish()  # no draw function: a bar chart of the rows
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "b.json").read_text())["rows"][0]["name"] == "ours"
    calls = []

    def draw(plt):
        calls.append(1)
        fig, ax = plt.subplots()
        ax.plot([1, 2], [3, 4])
        return fig

    Report("00_test", argparse.Namespace(json=None, plot=str(path))).finish(plot=draw)
    Report("00_test", argparse.Namespace(json=None, plot=None)).finish(plot=draw)  # not asked: not drawn
    assert calls == [1] and path.read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "bench.png"]
