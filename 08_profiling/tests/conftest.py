"""Shared fixtures of stage 08's tests.

- `model`: a tiny random GPT (2 layers, 2 heads, width 32, context 256) in float32: every
  profile, sweep and replay on it takes milliseconds, and its shapes are known, so FLOP
  and byte counts can be checked by hand.
- `report_numbers_ok(md, data)`: the check that every figure printed in a report comes
  from the data it was built from (see `unexplained_numbers`).

Every test module runs torch on one thread (the course plugin's `one_thread`): the
tensors are tiny, and a second thread only adds waiting on a busy machine.
"""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from solutions.gpt import GPT, GPTConfig

CONFIG = dict(vocab_size=257, block_size=256, n_layer=2, n_head=2, n_embd=32)


@pytest.fixture(scope="module", autouse=True)
def _single_threaded(one_thread):
    """Every test module here runs on one torch thread."""


@pytest.fixture(scope="session")
def model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**CONFIG)).eval()


#: The unit scales a report may apply to a stored value: as is, ms / µs from seconds,
#: G (1e-9) from FLOP/s and bytes/s, % from a fraction, MiB from bytes.
SCALES = (1.0, 1e3, 1e6, 1e-9, 100.0, 2.0 ** -20)
#: A figure: digits not inside a word (`b1`, `float32`, `x86_64` are names) and not part of a
#: longer number or version (`2.13.0`), with or without a unit glued on: `5.02x`, `12ms`,
#: `3.1GB/s` are figures as much as `5.02 times` is.
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\d_]|\.\d)")


def _leaves(o, nums: list, texts: list) -> None:
    if isinstance(o, dict):
        for v in o.values():
            _leaves(v, nums, texts)
    elif isinstance(o, list):
        for v in o:
            _leaves(v, nums, texts)
    elif isinstance(o, bool) or o is None:
        pass
    elif isinstance(o, (int, float)):
        nums.append(float(o))
    elif isinstance(o, str):
        texts.append(o)


def unexplained_numbers(md: str, data: dict) -> list[str]:
    """The figures in a report's Markdown (outside its embedded ```json block) that no value
    of `data` explains: a figure x with d decimals is explained by a number v and a unit
    scale s when |v·s − x| ≤ ½·10^−d, or by appearing inside one of data's strings."""
    body = re.sub(r"```json.*?```", "", md, flags=re.S)
    nums, texts = [], []
    _leaves(data, nums, texts)
    bad = []
    for x in NUMBER.findall(body):
        d = len(x.split(".")[1]) if "." in x else 0
        tol = 0.5 * 10 ** -d * (1 + 1e-9) + 1e-12
        fx = float(x)
        if any(math.isfinite(v) and abs(v * s - fx) <= tol for v in nums for s in SCALES):
            continue
        if any(re.search(rf"(?<![\w.]){re.escape(x)}(?![\d_]|\.\d)", t) for t in texts):
            continue
        bad.append(x)
    return bad


@pytest.fixture(scope="session")
def report_check():
    return unexplained_numbers


def embedded_json(md: str) -> dict:
    m = re.search(r"```json\n(.*?)\n```", md, flags=re.S)
    assert m, "the report does not embed its data as a ```json block"
    return json.loads(m.group(1))


@pytest.fixture(scope="session")
def report_json():
    return embedded_json
