"""The prepared device script, gpu_check.sh, cannot be run here (no GPU), so check what can be
checked cheaply: it and the stage scripts it calls parse (`bash -n`), and everything it names
exists: the scripts and benches, the `course` commands and the server options it uses, the
stage 06 bench's `gpu` part, and the functions of stage 07's load generator it imports."""
from __future__ import annotations

import ast
import re
import subprocess

import pytest

from course.cli import build_parser
from tests.helpers import ROOT

SCRIPT = ROOT / "gpu_check.sh"
CALLED = ("06_paged_attention/gpu_check.sh", "08_profiling/gpu_report.sh")


@pytest.mark.parametrize("path", ["gpu_check.sh", *CALLED])
def test_the_device_scripts_parse(path):
    r = subprocess.run(["bash", "-n", str(ROOT / path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"bash -n {path}: {r.stderr}"


def _text() -> str:
    return "\n".join((ROOT / p).read_text(encoding="utf-8") for p in ("gpu_check.sh", *CALLED))


def test_every_script_and_bench_it_names_exists():
    named = set(re.findall(r"(?<![\w$/])((?:\d\d_\w+|tests)/[\w./-]+\.(?:sh|py))", _text()))
    assert set(CALLED) <= named and "07_serving/bench.py" in named, sorted(named)
    missing = [n for n in sorted(named) if not (ROOT / n).exists()]
    assert not missing, f"gpu_check.sh and the scripts it calls name files that do not exist: {missing}"
    # the glob of test files with a `gpu` test finds some
    assert any("mark.gpu" in p.read_text(encoding="utf-8") for p in ROOT.glob("[0-9][0-9]_*/tests/test_*.py"))


def test_the_course_commands_and_options_it_uses_exist():
    text = _text()
    used = set(re.findall(r"-m course (\w+)", text)) | set(re.findall(r'"-m", "course", "(\w+)"', text))
    assert used == {"serve", "profile"}, used
    parser = build_parser()
    parser.parse_args(["profile", "--device", "cuda", "--threads", "1", "--out", "x"])  # SystemExit if unknown
    parser.parse_args(["serve", "--port", "1"])
    server_cli = (ROOT / "solutions" / "server" / "cli.py").read_text(encoding="utf-8")
    assert "add_device_arguments(" in server_cli  # --device / --dtype, solutions/device.py's
    for option in ("--port", "--threads", "--max-batch-size", "--grace", "--request-log"):
        assert f'"{option}"' in server_cli, f"course serve has no {option}"
    from solutions.device import add_device_arguments  # noqa: F401 - the shared --device / --dtype


def test_the_benches_and_the_load_generator_have_what_it_calls():
    bench06 = (ROOT / "06_paged_attention" / "bench.py").read_text(encoding="utf-8")
    assert re.search(r'PARTS = \([^)]*"gpu"', bench06) and "paged_decode_split" in bench06
    tree = ast.parse((ROOT / "07_serving" / "bench.py").read_text(encoding="utf-8"))
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    calls = set(re.findall(r"bench07\.(\w+)\(", SCRIPT.read_text(encoding="utf-8")))
    assert calls == {"load", "summarize_http", "source_tokens", "free_port"}, calls
    assert calls <= defined, f"07_serving/bench.py lacks {sorted(calls - defined)}"
