"""Answers as plain data: what a hidden test reports, judged outside the learner's process.

Learner code runs in the test process, so anything that runs there (an `assert`, a
comparison helper, the test itself) can be rewritten by it. A hidden test therefore also
*reports* the learner's outputs on its inputs:

    course.answer("grad", x.grad)                 # an array: compared within the tolerance
    course.answer("order", [id_of[t] for t in order], exact=True)

Each value is turned into plain data in the test process (numbers, strings, None, lists,
dicts with string keys, arrays of a numeric dtype; see `encode`) and sent to the grading
parent as JSON, which runs no code when read. The parent compares it with the reference
solution's answer to the same test, recorded in a trusted process that never loads learner
code (`course.grading`), with the tolerance the *reference* run stated. A hidden test earns
its points only when it passed in its own process AND every answer the reference gave
arrived and matches. A value that cannot be turned into plain data raises `TypeError` in
the test, which then fails.

Outside grading (`pytest`, `course check`, notebooks) `answer` only checks that the value
converts, so the learner sees the same `TypeError` early.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any

import numpy as np

MAX_BYTES = 4 << 20  # one answer's encoded size at most
KINDS = {"b": "b", "i": "i", "u": "i", "f": "f"}  # dtype kinds that compare with each other
DEFAULT_RTOL, DEFAULT_ATOL = 1e-6, 1e-9

_sink: Callable[[dict], None] | None = None  # set by the pytest plugin under `course grade`


def set_sink(sink: Callable[[dict], None] | None) -> None:
    global _sink
    _sink = sink


def answer(name: str, value: Any, *, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
           exact: bool = False) -> None:
    """Report `value` as this test's answer `name` (a hidden test's points depend on it).

    Floats compare as |got - want| <= atol + rtol·|want| (NaN equals NaN), arrays also by
    shape and dtype kind (bool / integer / float); `exact=True` asks for equality. Only the
    reference run's tolerance counts. Naming an answer twice in one test keeps the last."""
    if type(name) is not str or not name:
        raise TypeError(f"answer: the name must be a non-empty str, got {name!r:.60}")
    enc = encode(value, name)
    if _sink is not None:
        _sink({"name": name, "value": enc, "rtol": 0.0 if exact else float(rtol),
               "atol": 0.0 if exact else float(atol)})


# ---- plain data ------------------------------------------------------------------------

def encode(value: Any, name: str = "value", _depth: int = 0, _budget: list | None = None) -> dict:
    """`value` as tagged JSON-ready data: {"v": scalar} | {"a": [dtype, shape, base64]} |
    {"l": [...]} | {"d": {str: ...}}. Exact types only: a subclass that could lie about
    itself is refused, except numpy's scalars and arrays, which are read as raw bytes."""
    budget = _budget if _budget is not None else [MAX_BYTES]
    if _depth > 20:
        raise TypeError(f"answer {name!r}: nested more than 20 deep")
    t = type(value)
    if value is None or t in (bool, int, str):
        if t is int and abs(value) >= 2 ** 63:
            raise TypeError(f"answer {name!r}: an int this large is not plain data; report it as a str")
        budget[0] -= len(value) if t is str else 8
        _spend(budget, name)
        return {"v": value}
    if t is float:
        budget[0] -= 8
        _spend(budget, name)
        return {"v": value}
    if t in (list, tuple):
        return {"l": [encode(v, name, _depth + 1, budget) for v in value]}
    if t is dict:
        if not all(type(k) is str for k in value):
            raise TypeError(f"answer {name!r}: a dict's keys must be str")
        return {"d": {k: encode(v, name, _depth + 1, budget) for k, v in value.items()}}
    arr = _as_array(value, name)
    if arr is None:
        raise TypeError(f"answer {name!r}: a {t.__module__}.{t.__qualname__} is not plain data "
                        "(report numbers, strings, None, lists, dicts with str keys, or numeric arrays)")
    if arr.dtype.kind not in KINDS:
        raise TypeError(f"answer {name!r}: arrays of dtype {arr.dtype} are not plain data (numeric or bool only)")
    budget[0] -= arr.nbytes
    _spend(budget, name)
    return {"a": [arr.dtype.str, list(arr.shape), base64.b64encode(arr.tobytes()).decode("ascii")]}


def _spend(budget: list, name: str) -> None:
    if budget[0] < 0:
        raise TypeError(f"answer {name!r}: larger than {MAX_BYTES >> 20} MiB; report a summary of it")


def _as_array(value: Any, name: str) -> np.ndarray | None:
    """A numpy array holding `value`'s own data, or None when it is neither numpy nor torch."""
    if isinstance(value, (np.ndarray, np.generic)):
        # a base-class copy of the bytes: a subclass's overridden methods never run
        base = np.ndarray.view(np.asarray(value), np.ndarray) if isinstance(value, np.ndarray) else np.asarray(value)
        return np.array(base, copy=True, subok=False, order="C")
    torch = __import__("sys").modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            t = torch.Tensor.detach(value)
            if t.dtype in (torch.bfloat16, torch.float16):
                t = t.float()
            if t.is_complex() or t.is_quantized or t.layout != torch.strided:
                raise TypeError(f"answer {name!r}: a {t.dtype} / {t.layout} tensor is not plain data")
            return np.array(torch.Tensor.numpy(t.cpu().contiguous()), copy=True, order="C")
    return None


def decode_array(enc: list) -> np.ndarray:
    """The array of an {"a": [dtype, shape, base64]} record (never runs code)."""
    dtype, shape, data = enc
    dt = np.dtype(str(dtype))
    if dt.kind not in KINDS:
        raise ValueError(f"dtype {dt} is not allowed")
    shape = tuple(int(s) for s in shape)
    raw = base64.b64decode(str(data), validate=True)
    n = math.prod(shape)
    if len(raw) != n * dt.itemsize:
        raise ValueError(f"{len(raw)} bytes for shape {shape} of {dt}")
    return np.frombuffer(raw, dtype=dt).reshape(shape)


# ---- the parent's comparison -----------------------------------------------------------

def differs(want: dict, got: Any, rtol: float, atol: float, where: str = "") -> str | None:
    """None when `got` (as the learner's process sent it) matches the reference's `want`;
    else what differs, without quoting the expected values."""
    try:
        return _differs(want, got, float(rtol), float(atol), where)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as e:
        return f"{where or 'the value'} is malformed ({type(e).__name__})"


def _numeric(rec: Any) -> np.ndarray | None:
    """A number, bool or array record as an array (None otherwise), so 3.0 and an 0-d array compare."""
    if not isinstance(rec, dict) or len(rec) != 1:
        return None
    if "a" in rec:
        return decode_array(rec["a"])
    if "v" in rec and type(rec["v"]) in (bool, int, float):
        return np.asarray(rec["v"])
    return None


def _differs(want: dict, got: Any, rtol: float, atol: float, where: str) -> str | None:
    at = where or "the value"
    if not isinstance(got, dict) or len(got) != 1:
        return f"{at} is malformed"
    w_arr, g_arr = _numeric(want), _numeric(got)
    if w_arr is not None:
        if g_arr is None:
            return f"{at}: expected a number or an array"
        if w_arr.shape != g_arr.shape:
            return f"{at}: shape {g_arr.shape}, expected {w_arr.shape}"
        wk, gk = KINDS[w_arr.dtype.kind], KINDS[g_arr.dtype.kind]
        if wk != gk and not (wk == "f" and gk == "i") and not (wk == "i" and gk == "f" and (rtol or atol)):
            return f"{at}: dtype {g_arr.dtype}, expected a {dict(b='bool', i='integer', f='float')[wk]} value"
        if wk == "b" or (wk == "i" and not (rtol or atol)):
            ok = np.array_equal(w_arr, g_arr)
            return None if ok else f"{at}: {int(np.sum(w_arr != g_arr))} of {w_arr.size} values differ"
        w64, g64 = w_arr.astype(np.float64), g_arr.astype(np.float64)
        close = np.isclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True) | (w64 == g64)
        if close.all():
            return None
        with np.errstate(invalid="ignore"):
            worst = float(np.nanmax(np.abs(np.where(close, 0.0, g64 - w64)))) if w64.size else 0.0
        return f"{at}: {int((~close).sum())} of {w64.size} values differ (largest difference {worst:.3g})"
    (tag, wv), = want.items()
    if tag not in got:
        return f"{at}: expected a {dict(v='scalar', l='list', d='dict').get(tag, tag)}"
    gv = got[tag]
    if tag == "v":
        if type(gv) is not type(wv) or gv != wv:
            return f"{at} differs"
        return None
    if tag == "l":
        if not isinstance(gv, list):
            return f"{at} is malformed"
        if len(gv) != len(wv):
            return f"{at}: length {len(gv)}, expected {len(wv)}"
        for i, (w, g) in enumerate(zip(wv, gv)):
            d = _differs(w, g, rtol, atol, f"{at}[{i}]")
            if d:
                return d
        return None
    if tag == "d":
        if not isinstance(gv, dict):
            return f"{at} is malformed"
        if set(gv) != set(wv):
            missing, extra = sorted(set(wv) - set(gv)), sorted(set(gv) - set(wv))
            return f"{at}: keys differ (missing {missing[:3]}, unexpected {extra[:3]})"
        for k in wv:
            d = _differs(wv[k], gv[k], rtol, atol, f"{at}[{k!r}]")
            if d:
                return d
        return None
    return f"{at}: unknown record {tag!r}"
