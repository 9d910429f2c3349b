"""Seeded, replayable request traces for stage 05's batching engines (given code).

A *trace* is the list of requests a server will see: for each one, when it arrives
(seconds after the trace starts), its prompt (token ids) and how many tokens it will
generate. The same seed always gives the same trace, so every scheduler in stage 05 is
compared on exactly the same work.

Three length profiles:

- ``"mix"``: the serving mix of the source notes, 6 : 3 : 1 of short prompt / short output,
  short prompt / long output and long prompt / short output; lengths uniform per kind.
- ``"uniform"``: one kind, prompt and output lengths uniform over their ranges.
- ``"longtail"``: short prompts, output lengths from a (clipped) Pareto distribution: most
  answers are short, a few are very long. This is what makes request-level batching waste
  its batch: the batch lives as long as its longest answer.

Two arrival processes: all at once (``rate=None``, an offline batch job) or Poisson at
``rate`` requests per second (an online service: exponential gaps between arrivals).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

#: request kinds of the "mix" profile and their weights (the source notes' 6 : 3 : 1)
MIX = {"short/short": 6, "short/long": 3, "long/short": 1}
PROFILES = ("mix", "uniform", "longtail")


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: arrives `arrival` seconds after the start."""

    arrival: float
    prompt: tuple[int, ...]
    max_new_tokens: int
    kind: str = ""


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival time. Iterate it, or `len()` it."""

    requests: tuple[TraceRequest, ...]
    name: str = "trace"

    def __post_init__(self) -> None:
        arrivals = [r.arrival for r in self.requests]
        if arrivals != sorted(arrivals):
            raise ValueError("a trace's requests must be sorted by arrival time")

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[TraceRequest]:
        return iter(self.requests)

    @property
    def prompt_tokens(self) -> int:
        return sum(len(r.prompt) for r in self.requests)

    @property
    def output_tokens(self) -> int:
        return sum(r.max_new_tokens for r in self.requests)

    @property
    def max_total_len(self) -> int:
        """The longest prompt + output of any request (it must fit the model's context)."""
        return max((len(r.prompt) + r.max_new_tokens for r in self.requests), default=0)

    def describe(self) -> str:
        kinds: dict[str, int] = {}
        for r in self.requests:
            kinds[r.kind] = kinds.get(r.kind, 0) + 1
        span = self.requests[-1].arrival if self.requests else 0.0
        outs = np.array([r.max_new_tokens for r in self.requests])
        return (f"{self.name}: {len(self)} requests over {span:.2f} s, {self.prompt_tokens} prompt + "
                f"{self.output_tokens} output tokens (output p50 {np.median(outs):.0f}, max {outs.max()}); "
                + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))

    def merged(self, other: Trace, name: str | None = None) -> Trace:
        """Both traces' requests in one trace, in arrival order (stable: self's first on ties)."""
        both = sorted([*self.requests, *other.requests], key=lambda r: r.arrival)
        return Trace(tuple(both), name or f"{self.name}+{other.name}")


def _check_range(name: str, lo_hi: tuple[int, int]) -> tuple[int, int]:
    if (not isinstance(lo_hi, tuple) or len(lo_hi) != 2 or not all(isinstance(v, int) for v in lo_hi)
            or not 1 <= lo_hi[0] <= lo_hi[1]):
        raise ValueError(f"{name} must be a (low, high) pair of ints with 1 <= low <= high, got {lo_hi!r}")
    return lo_hi


def arrivals(n: int, rate: float | None, rng: np.random.Generator) -> np.ndarray:
    """n arrival offsets in seconds: all 0 (rate None), else a Poisson process of `rate`/s
    starting at 0 (gaps are exponential with mean 1/rate)."""
    if rate is None:
        return np.zeros(n)
    if not isinstance(rate, (int, float)) or not rate > 0:
        raise ValueError(f"rate must be a positive number of requests per second or None, got {rate!r}")
    gaps = rng.exponential(1.0 / rate, size=n)
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])])


def _prompt(length: int, rng: np.random.Generator, source: np.ndarray | None) -> tuple[int, ...]:
    """Random printable bytes, or a random window of `source` (real text's token ids)."""
    if source is None:
        return tuple(int(t) for t in rng.integers(32, 127, size=length))
    if len(source) < length:
        raise ValueError(f"the prompt source has {len(source)} tokens, a prompt needs {length}")
    start = int(rng.integers(0, len(source) - length + 1))
    return tuple(int(t) for t in source[start:start + length])


def make_trace(n: int, *, profile: str = "mix", rate: float | None = None, seed: int = 0,
               short_prompt: tuple[int, int] = (8, 32), long_prompt: tuple[int, int] = (96, 160),
               short_output: tuple[int, int] = (4, 16), long_output: tuple[int, int] = (32, 96),
               tail_alpha: float = 1.1, source: Sequence[int] | None = None,
               name: str | None = None) -> Trace:
    """A seeded trace of `n` requests (see the module docstring for the profiles).

    ``longtail`` draws output lengths as ``short_output[0] * U**(-1/tail_alpha)`` (a Pareto
    tail: smaller alpha, heavier tail) clipped to ``long_output[1]``.
    ``source``: token ids to cut prompts from (default: random printable bytes).
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    if not tail_alpha > 0:
        raise ValueError(f"tail_alpha must be > 0, got {tail_alpha!r}")
    sp, lp = _check_range("short_prompt", short_prompt), _check_range("long_prompt", long_prompt)
    so, lo = _check_range("short_output", short_output), _check_range("long_output", long_output)
    rng = np.random.default_rng(seed)
    src = None if source is None else np.asarray(source, dtype=np.int64)
    when = arrivals(n, rate, rng)

    def uniform(r: tuple[int, int]) -> int:
        return int(rng.integers(r[0], r[1] + 1))

    out = []
    for t in when:
        if profile == "mix":
            kinds = list(MIX)
            weights = np.array([MIX[k] for k in kinds], dtype=float)
            kind = kinds[int(rng.choice(len(kinds), p=weights / weights.sum()))]
            p_range = lp if kind.startswith("long") else sp
            o_range = lo if kind.endswith("long") else so
            p_len, o_len = uniform(p_range), uniform(o_range)
        elif profile == "uniform":
            kind, p_len, o_len = "uniform", uniform(sp), uniform((so[0], lo[1]))
        else:
            kind, p_len = "longtail", uniform(sp)
            o_len = int(min(lo[1], so[0] * (1.0 - rng.random()) ** (-1.0 / tail_alpha)))
        out.append(TraceRequest(float(t), _prompt(p_len, rng, src), o_len, kind))
    label = name or f"{profile} n={n} " + ("all at once" if rate is None else f"Poisson {rate:g}/s") + f" seed={seed}"
    return Trace(tuple(out), label)


def long_prompt_trace(*, n_decodes: int = 8, decode_prompt: int = 16, decode_len: int = 160,
                      n_long: int = 3, long_len: int = 512, long_output: int = 4, first: float = 0.05,
                      every: float = 0.1, seed: int = 0) -> Trace:
    """The chunked-prefill scenario: `n_decodes` requests start at once and decode for a
    long time; `n_long` prompts of `long_len` tokens arrive among them, the first at
    `first` seconds and then every `every` seconds."""
    for k, v in (("n_decodes", n_decodes), ("decode_prompt", decode_prompt), ("decode_len", decode_len),
                 ("n_long", n_long), ("long_len", long_len), ("long_output", long_output)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{k} must be a positive int, got {v!r}")
    if first < 0 or every < 0:
        raise ValueError(f"first and every must be >= 0 seconds, got {first!r}, {every!r}")
    rng = np.random.default_rng(seed)
    decodes = [TraceRequest(0.0, _prompt(decode_prompt, rng, None), decode_len, "decode")
               for _ in range(n_decodes)]
    longs = [TraceRequest(first + i * every, _prompt(long_len, rng, None), long_output, "long prompt")
             for i in range(n_long)]
    return Trace(tuple(decodes + longs), f"{n_decodes} decodes + {n_long} x {long_len}-token prompts")
