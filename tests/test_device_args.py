"""`--device cpu|cuda` and `--dtype float32|float16|bfloat16`: one parser (solutions/device.py)
behind every command that runs a model — `course serve`, `course demo`, `course profile`,
the benches of stages 04-08 — with the same `error: ...` and exit status 2 everywhere; the
default model loads straight onto the device in the dtype. CUDA-only checks are `gpu`."""

from __future__ import annotations

import runpy
import sys

import pytest
import torch

from course import cli
from solutions.device import (DTYPES, DeviceError, add_device_arguments, device_from_args, resolve_device,
                              resolve_dtype)
from solutions.gpt import load_default
from tests.helpers import ROOT

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
BENCHES = ["04_kv_cache", "05_batching", "06_paged_attention", "07_serving", "08_profiling"]


def test_names_resolve_and_bad_names_are_refused():
    assert resolve_device("cpu") == torch.device("cpu")
    assert {name: resolve_dtype(name) for name in DTYPES} == DTYPES  # all three compute on the CPU
    assert resolve_dtype(torch.bfloat16, "cpu") is torch.bfloat16
    for bad in ("fp8", "half", "float64", "", None, torch.int64):
        with pytest.raises(DeviceError, match="--dtype must be one of float32, float16, bfloat16"):
            resolve_dtype(bad)
    for bad in ("tpu", "CUDA", "cuda:x", "", 3):
        with pytest.raises(DeviceError, match="--device must be one of cpu, cuda"):
            resolve_device(bad)
    assert issubclass(DeviceError, ValueError)


@no_cuda
def test_cuda_without_cuda_is_a_clear_error():
    for name in ("cuda", "cuda:0"):
        with pytest.raises(DeviceError, match=r"--device cuda(:0)?: CUDA is not available here .*use --device cpu"):
            resolve_device(name)
    with pytest.raises(DeviceError, match="CUDA is not available"):
        resolve_dtype("bfloat16", "cuda")


def test_add_device_arguments_defaults_and_help():
    import argparse

    p = argparse.ArgumentParser()
    add_device_arguments(p)
    assert device_from_args(p.parse_args([])) == (torch.device("cpu"), torch.float32)
    assert device_from_args(p.parse_args(["--dtype", "bfloat16"])) == (torch.device("cpu"), torch.bfloat16)
    text = p.format_help()
    assert "--device cpu|cuda" in text and "--dtype float32|float16|bfloat16" in text


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_default_model_loads_in_the_dtype_with_its_head_tied(dtype):
    m32, _ = load_default()
    m, _ = load_default(dtype=dtype)
    assert {p.dtype for p in m.parameters()} == {dtype} and not m.training
    assert m.lm_head.weight is m.transformer.wte.weight and m.num_params() == m32.num_params()
    for (name, a), b in zip(m32.named_parameters(), m.parameters()):
        assert torch.equal(a.to(dtype), b), name


COMMANDS = [["demo", "--stages", "04"], ["profile", "--quick"], ["serve"]]
REFUSALS = [pytest.param(["--dtype", "fp8"], "error: --dtype must be one of float32, float16, bfloat16, got 'fp8'",
                         id="dtype"),
            pytest.param(["--device", "cuda"], "error: --device cuda: CUDA is not available here", id="cuda",
                         marks=no_cuda)]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
@pytest.mark.parametrize("flags, says", REFUSALS)
def test_course_commands_refuse_what_they_cannot_run(argv, flags, says, capsys, tmp_path):
    if argv[0] == "profile":
        argv = argv + ["--out", str(tmp_path / "report")]
    rc = cli.main(argv + flags)
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(says), err
    assert "Traceback" not in err and not (tmp_path / "report").exists()


def test_course_serve_help_lists_the_device_options(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["serve", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: course serve")
    assert "--device cpu|cuda" in out and "--dtype float32|float16|bfloat16" in out and "--port" in out


def _bench(folder: str, args: list[str], monkeypatch) -> int:
    threads = torch.get_num_threads()
    monkeypatch.setattr(sys, "argv", [f"{folder}/bench.py", "--threads", "1", *args])
    monkeypatch.setenv("COURSE_IMPL", "solution")
    try:
        with pytest.raises(SystemExit) as e:
            runpy.run_path(str(ROOT / folder / "bench.py"), run_name="__main__")
        return e.value.code
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("folder", BENCHES)
@pytest.mark.parametrize("flags, says", REFUSALS)
def test_benches_refuse_what_they_cannot_run_before_measuring(folder, flags, says, monkeypatch, capsys):
    assert _bench(folder, flags, monkeypatch) == 2
    captured = capsys.readouterr()
    assert says in captured.err and "measured" not in captured.out


def test_profile_collects_in_the_chosen_dtype():
    """Stage 08's measurements on the model in bfloat16 (loaded straight in it, not cast
    from a float32 copy): the report's environment and model say so."""
    import course

    data = course.load("profiling", impl="solution").collect(sections=["timers"], quick=True, dtype=torch.bfloat16)
    assert data["model"]["dtype"] == "bfloat16" and data["environment"]["device"] == "cpu"
    assert all(t["honest_s"] > 0 for t in data["timers"].values())


# ---- on a GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_course_profile_on_cuda_in_bfloat16(tmp_path, capsys):
    out = tmp_path / "report"
    assert cli.main(["profile", "--quick", "--device", "cuda", "--dtype", "bfloat16", "--threads", "1",
                     "--stages", "timers,ops,memory", "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "cuda" in text and "bfloat16" in text

@pytest.mark.gpu
def test_default_model_loads_straight_onto_cuda_in_bfloat16():
    """No float32 copy on the GPU: the GPU's peak allocation while loading is the bfloat16
    model plus at most one stored (float16) tensor in flight."""
    device = resolve_device("cuda")
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    m, _ = load_default(device=device, dtype=resolve_dtype("bfloat16", device))
    model_bytes = sum(p.numel() * p.element_size() for p in m.parameters())
    biggest = max(p.numel() for p in m.parameters()) * 2  # float16, as stored
    assert {p.device for p in m.parameters()} == {device} and {p.dtype for p in m.parameters()} == {torch.bfloat16}
    assert torch.cuda.max_memory_allocated(device) - before <= model_bytes + biggest + (1 << 20)


@pytest.mark.gpu
def test_engines_on_cuda_in_bfloat16_keep_their_kv_and_generators_on_the_gpu():
    from solutions.batching import ContinuousBatching, Request, SamplingParams
    from solutions.device import greedy_margins, must_agree
    from solutions.kv_cache import generate
    from solutions.paged import PagedEngine

    device = resolve_device("cuda")
    m32, tok = load_default()
    m16, _ = load_default(device=device, dtype=torch.bfloat16)
    engine = PagedEngine(m16, ContinuousBatching(4))
    assert engine.cache.k.device == device and engine.cache.k.dtype == torch.bfloat16
    ids = [tok.encode(p) for p in ("def main():\n", "import os\n", "for i in range(10):\n")]
    reqs = [engine.add_request(Request(x, 16)) for x in ids]
    sampled = engine.add_request(Request(ids[0], 8, sampling=SamplingParams(temperature=1.0, seed=0)))
    assert sampled.generator.device.type == "cuda"
    while engine.has_unfinished():
        engine.step()
    for x, ref, r in zip(ids, generate(m32, ids, 16).tokens, reqs):
        k = must_agree(greedy_margins(m32, x, ref), 0.5)
        assert r.output[:k] == ref[:k]
