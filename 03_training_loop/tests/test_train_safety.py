"""Checkpoints that are verified when loaded, and a command line that overwrites nothing shipped."""
from __future__ import annotations

import ast
import importlib
import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

import course
from solutions.fileio import CheckpointError, save_checked
from solutions.gpt import DEFAULT_WEIGHTS, GPT, GPTConfig, load_checkpoint

train = course.load("train")

TINY = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16)
CFG = replace(train.PRESETS["tiny"], model=TINY, block_size=16, steps=4, warmup_steps=2)


def _parts():
    torch.manual_seed(0)
    model = GPT(TINY)
    return model, train.make_optimizer(model, CFG), torch.Generator().manual_seed(0)


def _a_state(path):
    """A training state written by the given `save_checked` (not by exercise 3.10)."""
    model, opt, rng = _parts()
    state = {"step": 3, "model": model.state_dict(), "optimizer": opt.state_dict(),
             "rng": {"torch": torch.get_rng_state(), "data": rng.get_state()}, "history": {"step": [1, 2, 3]},
             "config": asdict(CFG)}
    return save_checked(path, state)


def _damaged(tmp_path):
    raw = _a_state(tmp_path / "good.pt").read_bytes()
    zeroed = bytearray(raw)
    zeroed[len(raw) // 2: len(raw) // 2 + 256] = bytes(256)
    files = {"empty": b"", "truncated": raw[: len(raw) // 2], "zeroed": bytes(zeroed), "garbage": b"\x00" * 4096}
    for name, data in files.items():
        (tmp_path / f"{name}.pt").write_bytes(data)
    return [tmp_path / f"{name}.pt" for name in files]


@pytest.mark.given
def test_damaged_training_states_are_clear_errors_naming_the_file(tmp_path):
    model, opt, rng = _parts()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    for path in _damaged(tmp_path):
        with pytest.raises(CheckpointError, match=path.name) as info:
            train.load_training_state(path, model=model, optimizer=opt, data_rng=rng, config=asdict(CFG))
        assert "weights_only" not in str(info.value) and "another config" not in str(info.value)
        assert isinstance(info.value, ValueError)
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())  # nothing was loaded


@pytest.mark.given
def test_another_config_only_when_it_differs(tmp_path):
    path = _a_state(tmp_path / "s.pt")
    model, opt, rng = _parts()
    with pytest.raises(ValueError, match=r"another config \(differs in \['steps'\]\)"):
        train.load_training_state(path, model=model, optimizer=opt, data_rng=rng,
                                  config=asdict(replace(CFG, steps=5)))
    with pytest.raises(CheckpointError, match="not a training state"):
        save_checked(tmp_path / "other.pt", {"weights": torch.zeros(2)})
        train.load_training_state(tmp_path / "other.pt", model=model, optimizer=opt, data_rng=rng)


@pytest.mark.exercise("3.10")
def test_saved_state_is_verified_and_resumes_with_its_own_config(tmp_path):
    model, opt, rng = _parts()
    path = train.save_training_state(tmp_path / "s.pt", model=model, optimizer=opt, step=3, data_rng=rng,
                                     history={"step": [1, 2, 3]}, config=asdict(CFG))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.pt"]  # no temporary file left
    step, history = train.load_training_state(path, model=model, optimizer=opt, data_rng=rng,
                                              config=asdict(CFG))  # the same config: no complaint
    assert step == 3 and history == {"step": [1, 2, 3]}, (
        f"load_training_state returns (step, history) as saved (3 steps done), got ({step}, {history})")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one flipped byte
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="s.pt"):
        train.load_training_state(path, model=model, optimizer=opt, data_rng=rng)


@pytest.mark.given
def test_model_checkpoints_are_verified_and_the_old_default_still_loads(tmp_path):
    from solutions.gpt import save_checkpoint

    path = save_checkpoint(GPT(TINY), tmp_path / "m.pt", {"note": "x"})
    assert load_checkpoint(path)[1] == {"note": "x"}
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2: len(raw) // 2 + 64] = bytes(64)
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="m.pt"):
        load_checkpoint(path)
    assert load_checkpoint(DEFAULT_WEIGHTS)[0].num_params() > 0  # saved before checksums: still loads


def _data(folder):
    rows = [{"id": str(i), "text": f"def f{i}(x):\n    return x + {i}\n" * 6, "source": "t"} for i in range(40)]
    for name in ("train", "val"):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return folder


@pytest.mark.exercise("3.10")
def test_cli_writes_under_the_run_folder_unless_told(tmp_path, monkeypatch, capsys, one_thread):
    monkeypatch.setattr(importlib.import_module(f"{train.__name__}.cli"), "RUNS_DIR", tmp_path / "runs")
    stamp = DEFAULT_WEIGHTS.stat().st_mtime_ns
    assert train.main(["--preset", "tiny", "--data", str(_data(tmp_path)), "--steps", "2", "--no-progress"]) == 0
    assert load_checkpoint(tmp_path / "runs" / "tiny" / "gpt.pt")[1]["steps"] == 2
    assert DEFAULT_WEIGHTS.stat().st_mtime_ns == stamp
    assert "runs/tiny/gpt.pt" in capsys.readouterr().out


@pytest.mark.given
def test_cli_refuses_to_overwrite_the_default_model_without_the_flag(tmp_path, capsys):
    stamp = DEFAULT_WEIGHTS.stat().st_mtime_ns
    for argv, message in ((["--out", str(DEFAULT_WEIGHTS)], "course's package"),
                          (["--replace-default-model"], "needs --preset default"),
                          (["--state", str(_a_state(tmp_path / "s.pt"))], "pass --resume"),
                          (["--steps", "0"], "--steps must be >= 1, got 0")):
        try:
            code = train.main(["--preset", "tiny", "--data", str(_data(tmp_path)), *argv, "--no-progress"])
        except SystemExit as e:
            code = e.code
        err = capsys.readouterr().err
        assert code == 2 and "error: " in err and message in err, err
    assert DEFAULT_WEIGHTS.stat().st_mtime_ns == stamp


@pytest.mark.given
def test_importing_the_module_sets_no_environment_variable():
    """Only the command line may set OMP_WAIT_POLICY: no module-level statement touches os.environ."""
    tree = ast.parse(Path(train.__file__).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            continue
        assert "environ" not in ast.unparse(node), ast.unparse(node)
