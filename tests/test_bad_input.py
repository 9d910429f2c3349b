"""Bad input to the course's tools: a clear error, the right exit code, and nothing lost.

Table-driven, one table per tool (`python -m solutions.dedup`, `python -m solutions.train`)
and one for the public functions. Every CLI case checks the exit status (2), that stderr
says `error: <what>` with the offending value and no traceback, and that no input and no
previous output changed (SHA-256 of every file before and after). The CLIs run in this
process (`main(argv)`); one case per tool also runs as a real subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from solutions import dedup as dd
from solutions import fileio
from solutions import kv_cache as kv
from solutions import train as tr
from solutions.gpt import DEFAULT_WEIGHTS, GPT, GPTConfig, load_checkpoint, save_checkpoint
from tests.helpers import ROOT, run

SHIPPED = [DEFAULT_WEIGHTS, *sorted((ROOT / "solutions" / "dedup").glob("*.py")),
           *sorted((ROOT / "solutions" / "train").glob("*.py")), ROOT / "README.md"]


def _doc(i: int) -> dict:
    words = " ".join(f"w{(i * 7 + j) % 97}x{j % 13}" for j in range(60))
    return {"id": f"d{i}", "text": f"def f{i}():\n    return '{words}'\n", "source": f"pkg{i % 5}/m{i}.py"}


def _write_jsonl(path: Path, records) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


def _hashes(*roots: Path) -> dict[str, str]:
    """SHA-256 of every file under the roots (files or folders), by path."""
    out = {}
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for p in files:
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _call(main, argv: list[str], capsys) -> tuple[int, str]:
    """Run a CLI's main in this process: (exit status, stderr)."""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    err = capsys.readouterr().err
    return code, err


def _unwritable_folder(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        folder = tmp_path / "readonly"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    if Path("/proc").is_dir():  # even root cannot create files there
        return Path("/proc")
    pytest.skip("running as root without /proc: no folder is unwritable")


# ---------------------------------------------------------------------------------- dedup


@pytest.fixture
def dedup_setup(tmp_path):
    """A corpus, a finished run's outputs in OUT, and a file where a folder is expected."""
    corpus = _write_jsonl(tmp_path / "corpus.jsonl", [_doc(i) for i in range(40)] + [_doc(3)])
    assert dd.main([str(corpus), str(tmp_path / "OUT"), "--no-progress", "--num-perm", "32"]) == 0
    (tmp_path / "a_file").write_text("not a folder\n")
    (tmp_path / "O2" / "train.jsonl").mkdir(parents=True)  # an output path that is a folder
    return tmp_path


DEDUP_CASES = [
    # (id, argv with {T} = the temporary folder, text the error must contain)
    ("rerun-on-own-train", ["{T}/OUT/train.jsonl", "{T}/OUT"], "lies inside the output folder"),
    ("rerun-on-own-removed", ["{T}/OUT/removed.jsonl", "{T}/OUT"], "lies inside the output folder"),
    ("input-in-output-subfolder", ["{T}/corpus.jsonl", "{T}"], "lies inside the output folder"),
    ("out-dir-is-a-file", ["{T}/corpus.jsonl", "{T}/a_file"], "is a file, not a folder"),
    ("out-dir-under-a-file", ["{T}/corpus.jsonl", "{T}/a_file/sub"], "a_file is a file"),
    ("output-is-a-folder", ["{T}/corpus.jsonl", "{T}/O2"], "O2/train.jsonl is a folder"),
    ("out-dir-unwritable", ["{T}/corpus.jsonl", "{RO}"], "not writable|cannot write"),
    ("out-dir-in-solutions", ["{T}/corpus.jsonl", "{ROOT}/solutions/new_out"], "course's package solutions/"),
    ("missing-input", ["{T}/nothing.jsonl", "{T}/O3"], "no such input file"),
    ("input-is-a-folder", ["{T}/OUT", "{T}/O3"], "is a folder"),
    ("threshold-out-of-range", ["{T}/corpus.jsonl", "{T}/O3", "--threshold", "1.5"], "threshold.*1.5"),
    ("num-perm-not-an-int", ["{T}/corpus.jsonl", "{T}/O3", "--num-perm", "many"], "invalid int value: 'many'"),
    ("num-perm-zero", ["{T}/corpus.jsonl", "{T}/O3", "--num-perm", "0"], "num_perm.*0"),
    ("unknown-profile", ["{T}/corpus.jsonl", "{T}/O3", "--profile", "prose"], "invalid choice: 'prose'"),
    ("negative-bound", ["{T}/corpus.jsonl", "{T}/O3", "--min-chars", "-1"], "min_chars.*-1"),
    ("fn-weight-out-of-range", ["{T}/corpus.jsonl", "{T}/O3", "--fn-weight", "2"], "fn-weight.*2"),
    ("fractions-bad", ["{T}/corpus.jsonl", "{T}/O3", "--fractions", "0.5", "0.5", "0.5"], "fractions"),
    ("limit-without-build", ["{T}/corpus.jsonl", "{T}/O3", "--limit", "3"], "--limit and --packages"),
    ("no-arguments", [], "give IN.jsonl and OUT_DIR"),
    ("build-and-run", ["{T}/corpus.jsonl", "{T}/O3", "--build-corpus", "{T}/c2.jsonl"], "not both"),
    ("build-over-shipped", ["--build-corpus", "{ROOT}/solutions/dedup/pipeline.py", "--limit", "2"], "course's package"),
    ("build-over-readme", ["--build-corpus", "{ROOT}/README.md", "--limit", "2"], "ships"),
    ("build-into-folder", ["--build-corpus", "{T}/OUT", "--limit", "2"], "is a folder"),
]


@pytest.mark.parametrize("argv,expected", [pytest.param(a, e, id=i) for i, a, e in DEDUP_CASES])
def test_dedup_cli_refuses_and_changes_nothing(dedup_setup, argv, expected, capsys):
    t = dedup_setup
    subs = {"{T}": str(t), "{ROOT}": str(ROOT), "{RO}": str(_unwritable_folder(t)) if "{RO}" in " ".join(argv) else ""}
    for k, v in subs.items():
        argv = [a.replace(k, v) for a in argv]
    before = _hashes(t, *SHIPPED)
    code, err = _call(dd.main, argv, capsys)
    assert code == 2, err
    assert "error: " in err and "Traceback" not in err
    import re

    assert re.search(expected, err), err
    assert _hashes(t, *SHIPPED) == before
    assert not (ROOT / "solutions" / "new_out").exists()
    assert not list(t.rglob(".partial-*"))
    report = json.loads((t / "OUT" / "report.json").read_text())
    assert dd.accounted(report) == report["input_lines"] == 41  # the previous run, still whole


def test_dedup_cli_subprocess_reports_without_traceback(dedup_setup):
    python = sys.executable
    t = dedup_setup
    before = _hashes(t)
    proc = run([python, "-m", "solutions.dedup", str(t / "OUT" / "train.jsonl"), str(t / "OUT")], timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert "inside the output folder" in proc.stderr
    assert _hashes(t) == before


# ---------------------------------------------------------------------------------- train


@pytest.fixture
def train_setup(tmp_path):
    """A data folder, a model, a valid training state of `--preset tiny --steps 4`, damaged copies."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train", "val"):
        _write_jsonl(data / f"{name}.jsonl", [_doc(i) for i in range(10)])
    cfg = replace(tr.PRESETS["tiny"], steps=4, warmup_steps=4)
    model = GPT(cfg.model)
    save_checkpoint(model, tmp_path / "model.pt")
    state = {"step": 2, "model": model.state_dict(), "optimizer": {"state": {}, "param_groups": []},
             "rng": {"torch": torch.get_rng_state(), "data": torch.Generator().get_state()},
             "history": {"step": [1, 2]}, "config": asdict(cfg)}
    fileio.save_checked(tmp_path / "state.pt", state)
    raw = (tmp_path / "state.pt").read_bytes()
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "truncated.pt").write_bytes(raw[: len(raw) // 3])
    zeroed = bytearray(raw)
    zeroed[len(raw) // 2: len(raw) // 2 + 512] = bytes(512)
    (tmp_path / "zeroed.pt").write_bytes(bytes(zeroed))
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "a_folder").mkdir()
    return tmp_path


TRAIN_CASES = [
    ("out-is-default-model", ["--out", str(DEFAULT_WEIGHTS)], "course's package solutions/"),
    ("out-is-shipped-code", ["--out", "{ROOT}/solutions/gpt.py"], "course's package solutions/"),
    ("out-is-the-data", ["--out", "{T}/data/train.jsonl"], "is the input"),
    ("history-is-the-data", ["--history", "{T}/data/val.jsonl"], "is the input"),
    ("plot-over-readme", ["--plot", "{ROOT}/README.md"], "ships"),
    ("out-is-a-folder", ["--out", "{T}/a_folder"], "is a folder"),
    ("out-under-a-file", ["--out", "{T}/a_file/m.pt"], "a_file is a file"),
    ("out-unwritable", ["--out", "{RO}/m.pt"], "not writable|cannot|Permission"),
    ("out-equals-state", ["--out", "{T}/x.pt", "--state", "{T}/x.pt"], "same file"),
    ("steps-zero", ["--steps", "0"], "--steps must be >= 1, got 0"),
    ("steps-not-an-int", ["--steps", "ten"], "invalid int value: 'ten'"),
    ("threads-negative", ["--threads", "-2"], "--threads must be >= 1, got -2"),
    ("grad-accum-zero", ["--grad-accum", "0"], "--grad-accum must be >= 1, got 0"),
    ("unknown-preset", ["--preset", "huge"], "invalid choice: 'huge'"),
    ("resume-without-state", ["--resume"], "--resume needs --state"),
    ("resume-missing-state", ["--resume", "--state", "{T}/nothing.pt"], "no training state at"),
    ("state-exists-no-resume", ["--state", "{T}/state.pt"], "exists: pass --resume"),
    ("resume-empty", ["--resume", "--state", "{T}/empty.pt"], "empty.pt is empty"),
    ("resume-truncated", ["--resume", "--state", "{T}/truncated.pt"], "truncated.pt .*corrupted or truncated"),
    ("resume-zeroed", ["--resume", "--state", "{T}/zeroed.pt"], "zeroed.pt is corrupted"),
    ("resume-a-model-file", ["--resume", "--state", "{T}/model.pt"], "model.pt .*(no checksum|not a training)"),
    ("resume-other-config", ["--resume", "--state", "{T}/state.pt", "--steps", "6"], "another config.*steps"),
    ("replace-default-other-preset", ["--replace-default-model"], "needs --preset default"),
    ("replace-default-and-out", ["--replace-default-model", "--out", "{T}/m.pt"], "not both"),
    ("data-missing", ["--data", "{T}/nowhere"], "no split at"),
    ("data-is-a-file", ["--data", "{T}/a_file"], "is a file"),
]


@pytest.mark.parametrize("argv,expected", [pytest.param(a, e, id=i) for i, a, e in TRAIN_CASES])
def test_train_cli_refuses_and_changes_nothing(train_setup, argv, expected, capsys, monkeypatch):
    t = train_setup
    monkeypatch.setattr(tr.cli, "RUNS_DIR", t / "runs")  # read by solutions/train/cli.py
    ro = str(_unwritable_folder(t)) if any("{RO}" in a for a in argv) else ""
    argv = [a.replace("{T}", str(t)).replace("{ROOT}", str(ROOT)).replace("{RO}", ro) for a in argv]
    if "--data" not in argv:
        argv += ["--data", str(t / "data")]
    if "--preset" not in argv:
        argv += ["--preset", "tiny"]
    before = _hashes(t, *SHIPPED)
    code, err = _call(tr.main, argv + ["--no-progress"], capsys)
    assert code == 2, err
    assert "error: " in err and "Traceback" not in err
    import re

    assert re.search(expected, err), err
    assert _hashes(t, *SHIPPED) == before
    assert not (t / "runs").exists() and not list(t.rglob(".partial-*"))


def test_train_cli_subprocess_refuses_the_default_model(train_setup):
    python = sys.executable
    t = train_setup
    before = _hashes(DEFAULT_WEIGHTS)
    proc = run([python, "-m", "solutions.train", "--preset", "tiny", "--data", str(t / "data"), "--out",
                str(DEFAULT_WEIGHTS)], timeout=120, env={"OMP_WAIT_POLICY": "PASSIVE"})  # (no re-exec)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert _hashes(DEFAULT_WEIGHTS) == before


def test_train_help_names_the_flag_that_replaces_the_default_model(capsys):
    with pytest.raises(SystemExit):
        tr.main(["--help"])
    assert "--replace-default-model" in capsys.readouterr().out


# ------------------------------------------------------------------------ public functions


def _tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16)).eval()


FUNCTION_CASES = [
    ("sample-nan-logits", lambda t: kv.sample(torch.tensor([[0.0, float("nan")]]), temperature=1.0),
     ValueError, "logits"),
    ("sample-inf-logits", lambda t: kv.sample(torch.tensor([[0.0, float("inf")]]), temperature=0.0),
     ValueError, "logits"),
    ("sample-all-masked", lambda t: kv.sample(torch.full((1, 4), float("-inf")), temperature=1.0),
     ValueError, "logits"),
    ("sample-temperature-inf", lambda t: kv.sample(torch.zeros(1, 4), temperature=float("inf")),
     ValueError, "temperature"),
    ("sample-temperature-nan", lambda t: kv.sample(torch.zeros(1, 4), temperature=float("nan")),
     ValueError, "temperature"),
    ("generate-id-out-of-vocab", lambda t: kv.generate(_tiny_gpt(), [[1, np.int64(9999)]], 2),
     ValueError, "prompt 0"),
    ("generate-stop-not-ids", lambda t: kv.generate(_tiny_gpt(), [[1, 2]], 2, stop=3.5),
     ValueError, "stop"),
    ("pipeline-input-in-output", lambda t: dd.run_pipeline(t / "OUT" / "train.jsonl", t / "OUT"),
     ValueError, "lies inside the output folder"),
    ("pipeline-out-dir-is-file", lambda t: dd.run_pipeline(t / "corpus.jsonl", t / "corpus.jsonl"),
     ValueError, "is a file"),
    ("quality-profile-unknown", lambda t: dd.quality_profile("prose"), ValueError, "profile.*prose"),
    ("load-state-empty", lambda t: _load_state(t / "empty.pt"), ValueError, "empty.pt is empty"),
    ("load-state-zeroed", lambda t: _load_state(t / "zeroed.pt"), ValueError, "zeroed.pt is corrupted"),
    ("load-state-truncated", lambda t: _load_state(t / "truncated.pt"), ValueError, "truncated.pt"),
    ("load-checkpoint-zeroed", lambda t: load_checkpoint(t / "zeroed.pt"), ValueError, "zeroed.pt"),
    ("load-checkpoint-missing", lambda t: load_checkpoint(t / "nothing.pt"), FileNotFoundError, "nothing.pt"),
]


def _load_state(path: Path):
    model = GPT(tr.PRESETS["tiny"].model)
    return tr.load_training_state(path, model=model, optimizer=tr.make_optimizer(model, tr.PRESETS["tiny"]),
                                  data_rng=torch.Generator())


@pytest.mark.parametrize("call,error,expected", [pytest.param(c, e, m, id=i) for i, c, e, m in FUNCTION_CASES])
def test_public_functions_raise_clear_errors(train_setup, call, error, expected):
    t = train_setup
    _write_jsonl(t / "corpus.jsonl", [_doc(i) for i in range(5)])
    (t / "OUT").mkdir()
    _write_jsonl(t / "OUT" / "train.jsonl", [_doc(i) for i in range(5)])
    before = _hashes(t)
    with pytest.raises(error, match=expected):
        call(t)
    assert _hashes(t) == before


def test_numpy_token_ids_are_accepted_like_ints():
    model = _tiny_gpt()
    as_ints = kv.generate(model, [[1, 2, 3]], 4, stop=7)
    as_numpy = kv.generate(model, [list(np.array([1, 2, 3]))], 4, stop=np.int64(7))
    assert as_numpy == as_ints
    kv.check_sampling(0.5, np.int64(3), None)  # top_k as a NumPy integer too


def test_a_bench_checks_its_output_paths_before_it_runs(tmp_path, capsys):
    """`--json`/`--plot` are checked when the arguments are read, not after a run of minutes:
    a missing folder is made (a release has no `out/`, which the stage READMEs' commands
    name); a folder given as the file is refused with exit 2."""
    from course.benchmark import bench_args

    target = tmp_path / "out" / "bench04" / "load.json"
    bench_args("t", ["--json", str(target), "--threads", "1"])
    assert target.parent.is_dir() and not target.exists()
    with pytest.raises(SystemExit) as e:
        bench_args("t", ["--plot", str(tmp_path), "--threads", "1"])
    assert e.value.code == 2 and "is a folder" in capsys.readouterr().err


def test_course_profile_makes_missing_parents_of_out_and_refuses_a_file(tmp_path):
    """`course profile --out A/B/DIR` makes A/B (as `course release` does; a README's
    `--out /tmp/profmeas/t1_1` failed on a fresh machine), and refuses an --out under a file."""
    from course.profile import UsageError, check_out

    assert check_out(tmp_path / "a" / "b" / "report") == (tmp_path / "a" / "b" / "report").resolve()
    assert (tmp_path / "a" / "b").is_dir() and not (tmp_path / "a" / "b" / "report").exists()
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="not a writable folder"):
        check_out(tmp_path / "f" / "report")
