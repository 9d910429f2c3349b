"""`course profile` runs on one torch thread unless told otherwise, and its report says when
the measurements' spreads make a figure unreliable (a knee found in noise, a throughput that
falls as the batch grows); a clean run's figures stand. The collection is replaced by fixed
data here (the real one is stage 08's, tested there): what is checked is the harness's part."""
from __future__ import annotations

import json
import types

import pytest
import torch

from course import cli
from course import profile as cprofile
from solutions import profiling as ref


def _pt(batch, tok_s, spread):
    return {"batch": batch, "step_s": batch / tok_s, "tokens_per_s": tok_s, "spread": spread}


CLEAN = {"points": [_pt(1, 480, 0.16), _pt(4, 1440, 0.05), _pt(16, 4150, 0.13), _pt(64, 8300, 0.2),
                    _pt(128, 8900, 0.2), _pt(256, 9600, 0.3)], "knee": {"batch": 64, "tokens_per_s": 8300,
                                                                      "min_gain": 0.1}}
# a two-thread run on the busy course machine (08_profiling/README.md): the knee found in noise
NOISY = {"points": [_pt(1, 6, 0.05), _pt(2, 10, 0.06), _pt(4, 18, 0.11), _pt(8, 100, 3.48), _pt(16, 508, 1.31),
                    _pt(32, 1975, 3.04), _pt(64, 1898, 4.58), _pt(128, 1434, 3.07), _pt(256, 430, 0.03)],
         "knee": {"batch": 32, "tokens_per_s": 1975, "min_gain": 0.1}}


def test_a_clean_sweep_stands_and_a_knee_in_noise_is_flagged():
    assert cprofile.reliability({"sweep": dict(CLEAN, context=64)}) == []
    notes = cprofile.reliability({"sweep": dict(NOISY, context=64), "environment": {"threads": 2}})
    text = "\n".join(notes)
    assert "the knee at batch 32 is UNRELIABLE" in text and "found in noise" in text, text
    assert "throughput falls as the batch grows" in text and "batch 256" in text, text
    assert "458%" in text and "--threads 1 (this run: 2 threads)" in text, text


def test_a_noisy_point_away_from_the_knee_does_not_unseat_it():
    pts = [dict(p) for p in CLEAN["points"]]
    pts[1]["spread"] = 4.5  # batch 4, far before the knee's comparisons
    notes = cprofile.reliability({"sweep": {"points": pts, "knee": CLEAN["knee"], "context": 64}})
    assert any("batch 4 spread 450%" in n for n in notes) and not any("UNRELIABLE" in n for n in notes), notes
    pts[4]["spread"] = 1.5  # batch 128: a point the knee's test compares
    notes = cprofile.reliability({"sweep": {"points": pts, "knee": CLEAN["knee"], "context": 64}})
    assert any("knee at batch 64 is UNRELIABLE" in n for n in notes), notes


def test_no_knee_in_noise_and_noisy_timers_are_flagged():
    pts = [dict(p, spread=2.0) for p in CLEAN["points"]]
    notes = cprofile.reliability({"sweep": {"points": pts, "knee": None, "context": 64},
                                  "timers": {"decode_b1": {"honest_s": 1e-3, "honest_spread": 1.7}}})
    assert any("'no knee inside the sweep' is UNRELIABLE" in n for n in notes), notes
    assert any("decode_b1's synchronised repeats spread 170%" in n for n in notes), notes


@pytest.mark.parametrize("sweep, flagged", [(CLEAN, False), (NOISY, True)], ids=["clean", "noisy"])
def test_course_profile_defaults_to_one_thread_and_reports_reliability(sweep, flagged, monkeypatch, tmp_path, capsys):
    seen = {}

    def collect(model=None, *, sections, device, dtype, quick, trace_path, progress, what=None):
        seen["threads"] = torch.get_num_threads()
        return {"environment": {"device": "cpu", "device_name": "x", "torch": torch.__version__,
                                "threads": torch.get_num_threads(), "quick": True, "engine": "PagedEngine",
                                "clock": "process CPU time"},
                "model": {"what": "fixed data", "params": 1, "n_layer": 1, "n_head": 1, "n_embd": 1,
                          "vocab_size": 257, "block_size": 64, "dtype": "float32"},
                "sweep": dict(sweep, context=64)}

    fake = types.SimpleNamespace(SECTIONS=ref.SECTIONS, collect=collect, write_report=ref.write_report)
    monkeypatch.setattr(cprofile, "load", lambda name, impl=None: fake)
    before = torch.get_num_threads()
    rc = cli.main(["profile", "--stages", "sweep", "--out", str(tmp_path / "report")])
    captured = capsys.readouterr()
    out = captured.out
    assert rc == 0, captured.err
    assert seen["threads"] == 1 and torch.get_num_threads() == before
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    data = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    assert "## How far to trust these figures" in md and "Measured with 1 torch thread" in md
    assert data["reliability"]["threads"] == 1
    assert ("UNRELIABLE" in md) == flagged and ("UNRELIABLE" in out) == flagged, md
    assert bool(data["reliability"]["notes"]) == flagged
    if not flagged:
        assert "the figures stand" in md
