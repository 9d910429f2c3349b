"""Stage 05: batching — static, dynamic and continuous batching, with chunked prefill.

One decode step of a batch costs far less than one step per sequence: the step reads
every weight once, whatever the number of rows (on a GPU a decode step is bound by that
memory traffic and barely grows with rows; on a CPU at these sizes it grows, but much more
slowly than the rows). So a server's throughput is set by how many of the batch's rows do
useful work at every step. Three ways to keep them busy, in order of sophistication:

- **static** batching: take a batch, run it until its SLOWEST request finishes. The rows of
  requests that finished early are wasted, and nobody new may join.
- **dynamic** batching: the same, but the batch is collected until it is full
  (`max_batch_size`) or its oldest request has waited `max_wait_ms`.
- **continuous** (iteration-level) batching: decide who runs before EVERY model step.
  Finished requests leave at once, waiting ones take their rows. With **chunked prefill**
  a per-step token budget splits long prompts into chunks that run alongside the others'
  decodes, so one long prompt never stalls everybody's next token.

What makes continuous batching possible is the stage-04 cache: `forward_cached` runs a
RAGGED batch — each row at its own position, some rows prefilling a chunk, others decoding
one token — so rows can join and leave between any two steps.

The pieces:

    Request                  one request's state machine and timestamps         (5.1)
    StaticBatching           a scheduler: who runs in the next step, how many
    DynamicBatching            tokens each; waiting / running queues and the
    ContinuousBatching         cache's token capacity                         (5.2–5.6)
    Engine                   the model and the cache; step() runs one scheduled
                             step; add_request() and abort() between steps       (5.2, 5.6)
    replay / serve           feed a trace (solutions.workload) to an engine
    request_metrics, summarize   TTFT, TPOT, inter-token latency, throughput    (5.7)

An engine is driven by a loop (`replay` here, an asyncio server in stage 07):

    engine = Engine(model, ContinuousBatching(max_batch_size=8))
    engine.add_request(Request(prompt_ids, max_new_tokens=32))
    while engine.has_unfinished():
        out = engine.step()          # out.tokens: [(request, token)] to stream
"""

from __future__ import annotations

import abc
import bisect
import itertools
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from solutions.gpt import DEFAULT_WEIGHTS, GPT, GPTConfig, load_default, on_one_thread
from solutions.kv_cache import KVCache, check_sampling, forward_cached, generate, sample
from solutions.tokenizer import ByteTokenizer
from solutions.workload import Trace, long_prompt_trace, make_trace

__all__ = [
    "State", "TRANSITIONS", "IllegalTransition", "Event", "SamplingParams", "Request",
    "SchedulerOutput", "Scheduler", "StaticBatching", "DynamicBatching", "ContinuousBatching",
    "StepRecord", "StepOutput", "Engine", "ManualClock", "RunResult", "replay", "serve",
    "RequestMetrics", "request_metrics", "percentile", "summarize",
    "format_table", "default_model", "Trace", "make_trace", "long_prompt_trace",
]


# ---- 5.1 the request lifecycle ----------------------------------------------------------

class State(str, Enum):
    """Where a request is. Prefill and decode are phases of RUNNING (see `Request.phase`)."""

    WAITING = "waiting"      # queued, holds nothing
    RUNNING = "running"      # holds a cache row and cache tokens; prefilling or decoding
    PREEMPTED = "preempted"  # evicted from the cache; goes back to WAITING to be recomputed
    FINISHED = "finished"    # done: "stop", "length" or "abort"; holds nothing


#: The legal moves of the state machine and, for moves to FINISHED, the reasons allowed.
#: Only a running request can generate, so only it can finish by "stop" or "length";
#: a request can be aborted from any state that is not already final.
TRANSITIONS: dict[tuple[State, State], tuple[str, ...]] = {
    (State.WAITING, State.RUNNING): (),
    (State.RUNNING, State.PREEMPTED): (),
    (State.PREEMPTED, State.WAITING): (),
    (State.RUNNING, State.FINISHED): ("stop", "length", "abort"),
    (State.WAITING, State.FINISHED): ("abort",),
    (State.PREEMPTED, State.FINISHED): ("abort",),
}


class IllegalTransition(ValueError):
    """A request was asked to make a move its state machine does not allow."""


@dataclass(frozen=True)
class Event:
    """A request entered `state` at `time` (the engine's clock, seconds)."""

    time: float
    state: State
    reason: str | None = None


@dataclass(frozen=True)
class SamplingParams:
    """How a request picks its tokens (stage 04's `sample`): temperature 0 is greedy.
    `seed` seeds the request's own generator, so its draws do not depend on who else is
    in the batch."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.top_k, self.top_p)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be None or an int, got {self.seed!r}")


_request_ids = itertools.count()


class Request:
    """One generation request and everything that happens to it.

    The tokens it knows are `prompt + output`. `num_computed` of them have their K/V in
    the cache; the rest (`num_pending`) still have to run through the model: the whole
    prompt at first (prefill, maybe in chunks), then one token per step (decode: the token
    sampled last step). A preempted request loses its cache, so `num_computed` drops to 0
    and prompt + output are recomputed in one "prefill" before it decodes on.

    `events` timestamps every state change; `token_times[i]` is when output[i] was made.
    """

    def __init__(self, prompt: Sequence[int], max_new_tokens: int = 16, *,
                 sampling: SamplingParams | None = None, stop: Iterable[int] = (), priority: int = 0,
                 request_id: str | None = None, arrival: float | None = None):
        if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence) or len(prompt) == 0:
            raise ValueError(f"prompt must be a non-empty sequence of token ids, got {prompt!r:.80}")
        if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in prompt):
            raise ValueError(f"prompt must hold non-negative int token ids, got {list(prompt)!r:.80}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        stop = (stop,) if isinstance(stop, int) else tuple(stop)
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in stop):
            raise ValueError(f"stop must be token ids (non-negative ints), got {stop!r}")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError(f"priority must be an int (lower runs first), got {priority!r}")
        if sampling is not None and not isinstance(sampling, SamplingParams):
            raise TypeError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
        self.request_id = f"req-{next(_request_ids)}" if request_id is None else str(request_id)
        self.prompt = tuple(int(t) for t in prompt)
        self.max_new_tokens = max_new_tokens
        self.sampling = sampling or SamplingParams()
        self.stop = frozenset(stop)
        self.priority = priority
        self.arrival = arrival          # set by Engine.add_request when None
        self.seq = 0                    # the engine's arrival counter: breaks ties in `order`
        self.state = State.WAITING
        self.events: list[Event] = []
        self.output: list[int] = []
        self.token_times: list[float] = []
        self.finish_reason: str | None = None
        self.num_computed = 0
        self.slot: int | None = None    # the cache row it holds while RUNNING
        self.generator: torch.Generator | None = None
        self.preemptions = 0

    # -- what it knows and what is left to compute
    @property
    def tokens(self) -> list[int]:
        return [*self.prompt, *self.output]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def num_pending(self) -> int:
        """Known tokens whose K/V are not in the cache yet."""
        return self.num_tokens - self.num_computed

    @property
    def phase(self) -> str:
        """"decode" when only the last sampled token is pending, else "prefill" (of the
        prompt, or a recompute of prompt + output after a preemption)."""
        return "decode" if self.output and self.num_pending == 1 else "prefill"

    @property
    def order(self) -> tuple[int, float, int]:
        """Queue order: priority (lower first), then arrival (first come, first served)."""
        return (self.priority, self.arrival if self.arrival is not None else float("inf"), self.seq)

    @property
    def finished(self) -> bool:
        return self.state is State.FINISHED

    def transition(self, to: State, now: float, reason: str | None = None) -> None:
        """Move to state `to` at time `now`, recording an `Event(now, to, reason)`.

        Legal moves are the keys of TRANSITIONS. A move to FINISHED needs one of the
        reasons TRANSITIONS lists for it (and sets `finish_reason`); any other move takes
        no reason. Anything else — including time running backwards — raises
        IllegalTransition, naming the request, the move and the reason.
        """
        # BEGIN SOLUTION 5.1
        to = State(to)
        allowed = TRANSITIONS.get((self.state, to))
        move = f"request {self.request_id}: {self.state.value} -> {to.value}"
        if allowed is None:
            raise IllegalTransition(f"{move} is not a legal transition")
        if to is State.FINISHED and reason not in allowed:
            raise IllegalTransition(f"{move} needs a reason in {allowed}, got {reason!r}")
        if to is not State.FINISHED and reason is not None:
            raise IllegalTransition(f"{move} takes no reason, got {reason!r}")
        if self.events and now < self.events[-1].time:
            raise IllegalTransition(f"{move} at {now} is earlier than its last event at {self.events[-1].time}")
        self.state = to
        self.events.append(Event(now, to, reason))
        if to is State.FINISHED:
            self.finish_reason = reason
        # END SOLUTION

    def append_token(self, token: int, now: float) -> str | None:
        """Record a token sampled at time `now`; return the finish reason it causes, if any.

        A stop token ends the request with "stop" and is NOT kept in `output` (as in
        stage 04's `generate`). Otherwise the token joins `output` with its time in
        `token_times`, and reaching `max_new_tokens` ends the request with "length".
        Returns None when the request goes on. (The engine makes the FINISHED move.)
        """
        # BEGIN SOLUTION 5.1
        if token in self.stop:
            return "stop"
        self.output.append(int(token))
        self.token_times.append(now)
        return "length" if len(self.output) >= self.max_new_tokens else None
        # END SOLUTION

    def __repr__(self) -> str:
        return (f"Request({self.request_id!r}, {self.state.value}, prompt={len(self.prompt)}, "
                f"output={len(self.output)}/{self.max_new_tokens}, computed={self.num_computed})")


# ---- schedulers: who runs in the next step ------------------------------------------------

@dataclass
class SchedulerOutput:
    """One step's plan. `chunks`: (request, n) — run the request's next n pending tokens.
    `admitted` moved WAITING -> RUNNING this step (they need a cache row); `preempted`
    moved RUNNING -> PREEMPTED (their cache must be freed, and they go back to waiting)."""

    chunks: list[tuple[Request, int]] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.chunks)


def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class Scheduler(abc.ABC):
    """The queues and the cache accounting every policy shares (given code).

    `waiting` is kept sorted by `Request.order` (priority, then arrival: FCFS); `running`
    holds the requests that own a cache row, in admission order. `max_cache_tokens` is
    the cache's capacity in tokens (its memory budget); a running request is charged
    `charge(request)`, and the total, `tokens_held()`, must stay within capacity.

    What memory costs is asked of `memory`, an object with `charge(request)` and
    `held()` (both in cache tokens) that an engine hands the scheduler when its memory is
    not a contiguous row per request (stage 06's paged engine charges whole blocks).
    Without one (`memory is None`) a request is charged the policy's own reservation,
    `tokens_needed(request)`.
    """

    name = "scheduler"
    fixed_shape = False  # see StaticBatching

    def __init__(self, max_batch_size: int = 8, *, max_cache_tokens: int | None = None):
        self.max_batch_size = _positive_int("max_batch_size", max_batch_size)
        if max_cache_tokens is not None:
            _positive_int("max_cache_tokens", max_cache_tokens)
        self.max_cache_tokens = max_cache_tokens  # None: the engine sets the whole cache
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.memory = None  # an engine's accounting: charge(request) and held(), in tokens

    # -- the queues
    def add(self, request: Request) -> None:
        """Queue a WAITING request in `order` (a preempted one goes back to its old place)."""
        bisect.insort(self.waiting, request, key=lambda r: r.order)

    def remove(self, request: Request) -> None:
        """Take a request out of whichever queue holds it (it finished or was aborted)."""
        for queue in (self.waiting, self.running):
            if request in queue:
                queue.remove(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def wake_time(self) -> float | None:
        """The clock time at which `schedule` would act with no new arrivals, if it is
        holding work back on purpose (dynamic batching's wait window); else None."""
        return None

    # -- the cache accounting
    def tokens_needed(self, request: Request) -> int:
        """Cache tokens charged to a running request: every token it knows. They must all
        be cached before it can sample its next one, and it grows by one per step."""
        return request.num_tokens

    def charge(self, request: Request) -> int:
        """Cache tokens admitting (or keeping) `request` costs now: `memory.charge` when an
        engine handed the scheduler its accounting, else the policy's `tokens_needed`."""
        return self.tokens_needed(request) if self.memory is None else self.memory.charge(request)

    def tokens_held(self) -> int:
        """Cache tokens the running requests hold: `memory.held()`, else their charges."""
        if self.memory is not None:
            return self.memory.held()
        return sum(self.tokens_needed(r) for r in self.running)

    def fits(self, request: Request) -> bool:
        """Room for `request`: a free row of the batch and its charge within capacity."""
        return (len(self.running) < self.max_batch_size
                and self.tokens_held() + self.charge(request) <= self.max_cache_tokens)

    def admit_fcfs(self, now: float, out: SchedulerOutput) -> None:
        """Move waiting requests to running, in queue order, while they fit. The first one
        that does not fit stops the admission: nobody overtakes the head of the queue, so
        under FCFS nobody starves."""
        while self.waiting and self.fits(self.waiting[0]):
            request = self.waiting.pop(0)
            request.transition(State.RUNNING, now)
            self.running.append(request)
            out.admitted.append(request)

    def plan_chunks(self) -> list[tuple[Request, int]]:
        """Without a token budget every running request runs all its pending tokens."""
        return [(r, r.num_pending) for r in self.running]

    @abc.abstractmethod
    def schedule(self, now: float) -> SchedulerOutput:
        """Decide the next step at time `now`: admit, preempt, and plan the chunks."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_batch_size={self.max_batch_size}, max_cache_tokens={self.max_cache_tokens})"


class StaticBatching(Scheduler):
    """Request-level batching, the baseline: a batch is formed only when the engine is
    idle, and runs until its slowest request finishes; nobody joins a running batch.

    It reserves the worst case up front — `tokens_needed` is prompt + max_new_tokens — so
    a batch it starts can always finish without running out of cache (and never preempts).

    `fixed_shape` (default True): the batch is one fixed-shape tensor, as in stage 04's
    `generate`: the row of a request that finished keeps being computed, for nobody, until
    the whole batch ends. With False, finished rows drop out of the forward (the row still
    idles: nobody may take it), which a CPU rewards, since its step time grows with rows.
    """

    name = "static"

    def __init__(self, max_batch_size: int = 8, *, fixed_shape: bool = True, max_cache_tokens: int | None = None):
        super().__init__(max_batch_size, max_cache_tokens=max_cache_tokens)
        if not isinstance(fixed_shape, bool):
            raise TypeError(f"fixed_shape must be a bool, got {fixed_shape!r}")
        self.fixed_shape = fixed_shape

    def tokens_needed(self, request: Request) -> int:
        return len(request.prompt) + request.max_new_tokens

    def batch_ready(self, now: float) -> bool:
        """Whether to start a batch now (the engine being idle): whenever anyone waits."""
        return bool(self.waiting)

    def schedule(self, now: float) -> SchedulerOutput:
        """If nothing runs and `batch_ready(now)`, admit a batch (FCFS, while it fits);
        then every running request runs all its pending tokens (`plan_chunks`)."""
        out = SchedulerOutput()
        # BEGIN SOLUTION 5.2
        if not self.running and self.batch_ready(now):
            self.admit_fcfs(now, out)
        out.chunks = self.plan_chunks()
        # END SOLUTION
        return out


class DynamicBatching(StaticBatching):
    """Static batching with a collection window: a batch starts once `max_batch_size`
    requests wait, or once the oldest waiting request has waited `max_wait_ms`,
    whichever comes first. A longer window fills bigger batches (throughput) at the
    price of queueing time (latency); the source notes start from 32–64 requests and
    10–20 ms for online serving, 128+ and 100+ ms for offline jobs."""

    name = "dynamic"

    def __init__(self, max_batch_size: int = 8, max_wait_ms: float = 10.0, *, fixed_shape: bool = True,
                 max_cache_tokens: int | None = None):
        super().__init__(max_batch_size, fixed_shape=fixed_shape, max_cache_tokens=max_cache_tokens)
        if isinstance(max_wait_ms, bool) or not isinstance(max_wait_ms, (int, float)) or not max_wait_ms >= 0:
            raise ValueError(f"max_wait_ms must be a number >= 0, got {max_wait_ms!r}")
        self.max_wait_ms = float(max_wait_ms)

    def deadline(self) -> float | None:
        """When the oldest waiting request's window closes (None if nobody waits)."""
        if not self.waiting:
            return None
        return min(r.arrival for r in self.waiting) + self.max_wait_ms / 1000.0

    def batch_ready(self, now: float) -> bool:
        """A full batch waits, or the window of the oldest waiting request has closed."""
        # BEGIN SOLUTION 5.3
        if len(self.waiting) >= self.max_batch_size:
            return True
        deadline = self.deadline()
        return deadline is not None and now >= deadline
        # END SOLUTION

    def wake_time(self) -> float | None:
        """While idle and collecting, the engine must come back at the window's deadline."""
        # BEGIN SOLUTION 5.3
        return self.deadline() if not self.running else None
        # END SOLUTION


class ContinuousBatching(Scheduler):
    """Iteration-level batching: before every step, finished requests have left and
    waiting ones join while there is a free row and cache capacity.

    Unlike the request-level schedulers it charges a request only the tokens it has
    (`Scheduler.tokens_needed`), not its worst case, so more requests fit. The bet can
    lose: requests grow by a token per step, and when the running ones no longer fit, the
    latest arrival is PREEMPTED — its cache freed, to be recomputed later (5.6).

    `max_tokens_per_step` (chunked prefill, 5.5): at most that many tokens per step;
    decodes come first (one token each), prompts fill the rest in chunks. It must be at
    least `max_batch_size`, so every running decode always fits in a step.
    """

    name = "continuous"

    def __init__(self, max_batch_size: int = 8, *, max_tokens_per_step: int | None = None,
                 max_cache_tokens: int | None = None):
        super().__init__(max_batch_size, max_cache_tokens=max_cache_tokens)
        if max_tokens_per_step is not None:
            _positive_int("max_tokens_per_step", max_tokens_per_step)
            if max_tokens_per_step < self.max_batch_size:
                raise ValueError(f"max_tokens_per_step ({max_tokens_per_step}) must be >= max_batch_size "
                                 f"({self.max_batch_size}): every running decode needs a token each step")
        self.max_tokens_per_step = max_tokens_per_step
        if max_tokens_per_step is not None:
            self.name = "continuous+chunked"

    def schedule(self, now: float) -> SchedulerOutput:
        """If the running requests do not fit the cache (`tokens_held() > max_cache_tokens`),
        `preempt` and admit NOBODY this step, even a waiting request that would fit the
        memory just freed; otherwise admit FCFS while requests fit. Then plan the chunks
        (`plan_chunks`).

        Why nobody: the running requests outgrew the cache (each grows by a token per
        step). Handing the victim's memory straight to a newcomer fills the cache again
        at once, so the next step preempts again (thrashing), and the newcomer overtakes
        the victim, which arrived first. The victim is back in `waiting`, in its old place,
        for the next step. vLLM's scheduler keeps the same rule: running before swapped
        before waiting, strictly, with no new prefill in a step that preempted or swapped
        out (vllm-project/vllm PR #5633, "don't schedule prefill if freeing kv cache")."""
        out = SchedulerOutput()
        # BEGIN SOLUTION 5.4
        if self.tokens_held() > self.max_cache_tokens:
            self.preempt(now, out)
        else:
            self.admit_fcfs(now, out)
        out.chunks = self.plan_chunks()
        # END SOLUTION
        return out

    def plan_chunks(self) -> list[tuple[Request, int]]:
        """Spend the step's token budget: first one token for every decoding request, then
        prompt chunks for the prefilling ones in admission order, each min(its pending
        tokens, what is left of the budget). Requests left with 0 tokens skip this step.
        Without a budget, everyone runs everything pending (`Scheduler.plan_chunks`)."""
        if self.max_tokens_per_step is None:
            return super().plan_chunks()
        # BEGIN SOLUTION 5.5
        left = self.max_tokens_per_step
        decoding = [r for r in self.running if r.phase == "decode"]
        prefilling = [r for r in self.running if r.phase == "prefill"]
        chunks = []
        for r in decoding + prefilling:
            n = min(r.num_pending, left)
            if n:
                chunks.append((r, n))
                left -= n
        return chunks
        # END SOLUTION

    def preempt(self, now: float, out: SchedulerOutput) -> None:
        """Preempt running requests until `tokens_held()` fits `max_cache_tokens`: the
        victim is the running request LAST in queue order (latest arrival, lowest
        priority); it leaves `running`, moves to PREEMPTED, and is listed in
        `out.preempted` (the engine frees its cache and queues it again). Nobody is
        admitted in the same step (`schedule`): the freed memory is not for a newcomer."""
        # BEGIN SOLUTION 5.6
        while self.running and self.tokens_held() > self.max_cache_tokens:
            victim = max(self.running, key=lambda r: r.order)
            self.running.remove(victim)
            victim.transition(State.PREEMPTED, now)
            out.preempted.append(victim)
        # END SOLUTION


# ---- the engine ----------------------------------------------------------------------------

@dataclass(frozen=True)
class StepRecord:
    """What one model step did (the engine keeps one per step, for metrics and plots)."""

    start: float
    end: float
    rows: int            # requests that ran tokens this step: the batch's occupancy
    dead_rows: int       # rows of finished requests a fixed-shape batch still computed
    decode_rows: int     # of which decoding (one token each)
    prefill_tokens: int  # prompt (or recompute) tokens run this step
    running: int         # requests holding a cache row
    waiting: int
    cached_tokens: int   # tokens in the cache after the step (never above max_cache_tokens)


@dataclass
class StepOutput:
    """What `Engine.step()` produced: `tokens` to stream, requests that finished or were
    preempted. `ran` is False when the scheduler planned nothing (idle, or waiting for a
    batch to fill)."""

    ran: bool
    tokens: list[tuple[Request, int]] = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)


class Engine:
    """The model, the stage-04 cache, and a scheduler; `step()` runs one scheduled step.

    The cache has one row per batch slot (`scheduler.max_batch_size` rows of `max_len`
    positions). A running request owns a row (`request.slot`); when it finishes, is
    preempted or aborted, the row is reset and free for the next one. The scheduler's
    `max_cache_tokens` (default: the whole cache, rows x max_len) is the memory budget it
    schedules against — stage 06 makes that budget physical with paged blocks.

    `clock` (default `time.monotonic`) stamps every event; pass a `ManualClock` for
    deterministic tests.
    """

    def __init__(self, model: GPT, scheduler: Scheduler, *, max_len: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if not isinstance(model, GPT):
            raise TypeError(f"model must be a solutions.gpt.GPT, got {type(model).__name__}")
        if not isinstance(scheduler, Scheduler):
            raise TypeError(f"scheduler must be a Scheduler, got {type(scheduler).__name__}")
        if scheduler.has_unfinished():
            raise ValueError("the scheduler already holds requests; give each engine a fresh scheduler")
        context = model.config.block_size
        max_len = context if max_len is None else max_len
        if isinstance(max_len, bool) or not isinstance(max_len, int) or not 1 <= max_len <= context:
            raise ValueError(f"max_len must be an int in 1..{context} (the model's context), got {max_len!r}")
        self.model = model.eval()
        self.scheduler = scheduler
        self.max_len = max_len
        self.clock = clock
        self.cache = self._make_cache()
        physical = self._cache_capacity()
        if scheduler.max_cache_tokens is None:
            scheduler.max_cache_tokens = physical
        elif scheduler.max_cache_tokens > physical:
            raise ValueError(f"max_cache_tokens {scheduler.max_cache_tokens} exceeds the cache's capacity of "
                             f"{physical} tokens ({self._describe_cache()})")
        self.device = model.transformer.wte.weight.device
        self.free_slots = list(range(scheduler.max_batch_size))
        self.dead_rows: list[Request] = []  # a fixed-shape batch's finished rows, still computed
        self.requests: dict[str, Request] = {}
        self.steps: list[StepRecord] = []
        self._seq = itertools.count()

    # -- the memory (a subclass with another cache overrides these three, and
    #    `_acquire` / `_release`: stage 06's PagedEngine owns memory by blocks)
    def _make_cache(self):
        """The KV cache: one row of `max_len` positions per batch slot."""
        return KVCache.for_model(self.model, self.scheduler.max_batch_size, max_len=self.max_len)

    def _cache_capacity(self) -> int:
        """Tokens the cache can hold: the scheduler's default `max_cache_tokens`."""
        return self.scheduler.max_batch_size * self.max_len

    def _describe_cache(self) -> str:
        return f"{self.scheduler.max_batch_size} rows x {self.max_len} positions"

    # -- between steps
    def add_request(self, request: Request, *, arrival: float | None = None) -> Request:
        """Queue a request. Its arrival time is `arrival`, else `request.arrival`, else now."""
        if not isinstance(request, Request):
            raise TypeError(f"add_request expects a Request, got {type(request).__name__}")
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in this engine")
        if request.state is not State.WAITING or request.events:
            raise ValueError(f"request {request.request_id!r} was already used ({request.state.value})")
        vocab = self.model.config.vocab_size
        if max(request.prompt) >= vocab:
            raise ValueError(f"request {request.request_id!r}: token id {max(request.prompt)} is outside "
                             f"the model's vocabulary 0..{vocab - 1}")
        total = len(request.prompt) + request.max_new_tokens
        if len(request.prompt) > self.max_len or total > self.max_len:
            raise ValueError(f"request {request.request_id!r}: prompt of {len(request.prompt)} tokens + "
                             f"max_new_tokens {request.max_new_tokens} = {total} exceeds the context of "
                             f"{self.max_len} positions")
        if total > self.scheduler.max_cache_tokens:
            raise ValueError(f"request {request.request_id!r} needs up to {total} cache tokens but the cache "
                             f"holds {self.scheduler.max_cache_tokens}: it could never run")
        now = self.clock()
        request.arrival = arrival if arrival is not None else (request.arrival if request.arrival is not None else now)
        request.seq = next(self._seq)
        request.events.append(Event(request.arrival, State.WAITING))
        if request.sampling.temperature > 0:
            request.generator = torch.Generator(device=self.device)
            if request.sampling.seed is None:
                request.generator.seed()
            else:
                request.generator.manual_seed(request.sampling.seed)
        self.requests[request.request_id] = request
        self.scheduler.add(request)
        return request

    def abort(self, request_id: str) -> bool:
        """Abort a request in any state: it leaves its queue, its cache row is freed, and it
        FINISHES with reason "abort". Returns False if it had already finished; an unknown
        id is a ValueError."""
        if request_id not in self.requests:
            raise ValueError(f"no request with id {request_id!r} in this engine")
        # BEGIN SOLUTION 5.6
        request = self.requests[request_id]
        if request.finished:
            return False
        self.scheduler.remove(request)
        if request.slot is not None:
            self._release(request)
        request.transition(State.FINISHED, self.clock(), "abort")
        return True
        # END SOLUTION

    def forget(self, request_id: str) -> Request:
        """Drop a FINISHED request from `requests` (a long-running server calls this once it
        has delivered the result, so memory stays flat) and return it. An unknown id or a
        request that has not finished is a ValueError."""
        request = self.requests.get(request_id)
        if request is None:
            raise ValueError(f"no request with id {request_id!r} in this engine")
        if not request.finished:
            raise ValueError(f"request {request_id!r} is {request.state.value}, not finished: abort it first")
        return self.requests.pop(request_id)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def wake_time(self) -> float | None:
        return self.scheduler.wake_time()

    # -- cache rows
    def _acquire(self, request: Request) -> None:
        request.slot = self.free_slots.pop(0)
        request.num_computed = 0

    def _dead_row(self, request: Request) -> Request:
        """Hand a finished request's cache row to a stand-in that recomputes the row's last
        position at every step: the work a fixed-shape batch spends on a finished row."""
        row = Request(request.tokens[:request.num_computed], 1)
        row.slot, row.num_computed = request.slot, request.num_computed - 1
        self.cache.lengths[row.slot] -= 1
        request.slot, request.num_computed = None, 0
        return row

    def _end_fixed_batch(self) -> None:
        """Once nobody in a fixed-shape batch is running, its dead rows are free."""
        if self.dead_rows and not self.scheduler.running:
            for row in self.dead_rows:
                self._release(row)
            self.dead_rows.clear()

    def _release(self, request: Request) -> None:
        """Free the request's cache row: its K/V are forgotten (recomputed if it resumes)."""
        self.cache.reset([request.slot])
        self.free_slots.append(request.slot)
        self.free_slots.sort()
        request.slot = None
        request.num_computed = 0

    # -- one step
    def step(self) -> StepOutput:
        """Schedule, free and assign cache rows, run the model once over the planned chunks,
        sample, and retire the requests that finished."""
        start = self.clock()
        self._end_fixed_batch()
        plan = self.scheduler.schedule(start)
        for request in plan.preempted:
            self._release(request)
            request.preemptions += 1
            request.transition(State.WAITING, start)
            self.scheduler.add(request)
        for request in plan.admitted:
            self._acquire(request)
        if plan.admitted:  # _acquire may find some tokens already cached (stage 06's prefix cache)
            plan.chunks = [(r, min(n, r.num_pending)) for r, n in plan.chunks if min(n, r.num_pending) > 0]
        if not plan.chunks:
            return StepOutput(ran=False, preempted=plan.preempted)
        decode_rows = sum(1 for r, _ in plan.chunks if r.phase == "decode")
        n_dead = len(self.dead_rows)
        with torch.no_grad():
            ready, logits = self._forward(plan.chunks + [(row, 1) for row in self.dead_rows])
            live = [i for i, r in enumerate(ready) if r not in self.dead_rows]
            ready = [ready[i] for i in live]
            tokens = self._sample(ready, logits[live])
        for row in self.dead_rows:  # recompute the same position again next step
            row.num_computed -= 1
            self.cache.lengths[row.slot] -= 1
        now = self.clock()
        out = StepOutput(ran=True, preempted=plan.preempted)
        for request, token in zip(ready, tokens):
            reason = request.append_token(token, now)
            if reason != "stop":
                out.tokens.append((request, token))
            if reason is not None:
                self.scheduler.remove(request)
                if self.scheduler.fixed_shape:
                    self.dead_rows.append(self._dead_row(request))
                else:
                    self._release(request)
                request.transition(State.FINISHED, now, reason)
                out.finished.append(request)
        self._end_fixed_batch()
        self.steps.append(StepRecord(
            start, now, rows=len(plan.chunks), dead_rows=n_dead, decode_rows=decode_rows,
            prefill_tokens=plan.num_tokens - decode_rows, running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting), cached_tokens=int(self.cache.lengths.sum())))
        return out

    def _forward(self, chunks: list[tuple[Request, int]]) -> tuple[list[Request], torch.Tensor]:
        """Run every planned chunk through the model, against the cache rows the requests own.

        chunks: (request, n) — the request's next n pending tokens,
        `request.tokens[request.num_computed : request.num_computed + n]`, at cache row
        `request.slot`. Rows of one forward are right-padded to the longest chunk; so that
        a 1-token decode is not padded to a 512-token prompt chunk, decode chunks (n == 1)
        and longer chunks run as two `forward_cached` calls. Advance `num_computed`.

        Returns (ready, logits): the requests whose chunk reached their newest token — a
        decode, or the last chunk of a prefill — with the logits (len(ready), V) at that
        position, which predict their next token. A request mid-prefill is not ready.
        """
        # BEGIN SOLUTION 5.2
        ready, rows_logits = [], []
        groups = ([c for c in chunks if c[1] == 1], [c for c in chunks if c[1] > 1])
        for group in filter(None, groups):
            group = sorted(group, key=lambda c: c[0].slot)
            slots = [r.slot for r, _ in group]
            # consecutive cache rows are read as a view of the cache; scattered ones are gathered (a copy)
            rows = slice(slots[0], slots[-1] + 1) if slots[-1] - slots[0] == len(slots) - 1 else slots
            n_new = torch.tensor([n for _, n in group], device=self.device)
            idx = torch.zeros(len(group), int(n_new.max()), dtype=torch.long, device=self.device)
            for b, (r, n) in enumerate(group):
                idx[b, :n] = torch.tensor(r.tokens[r.num_computed:r.num_computed + n], device=self.device)
            logits = forward_cached(self.model, idx, self.cache, rows=rows, n_new=n_new)
            last = logits[torch.arange(len(group), device=self.device), n_new - 1]  # (B, V)
            for b, (r, n) in enumerate(group):
                r.num_computed += n
                if r.num_pending == 0:
                    ready.append(r)
                    rows_logits.append(last[b])
        return ready, (torch.stack(rows_logits) if ready else torch.empty(0))
        # END SOLUTION

    def _sample(self, requests: list[Request], logits: torch.Tensor) -> list[int]:
        """Next token per request with its own sampling parameters: greedy rows in one
        argmax, the others one by one with their own generator."""
        tokens = [0] * len(requests)
        greedy = [i for i, r in enumerate(requests) if r.sampling.temperature == 0]
        if greedy:
            for i, t in zip(greedy, sample(logits[greedy], temperature=0.0).tolist()):
                tokens[i] = t
        for i, r in enumerate(requests):
            if r.sampling.temperature > 0:
                p = r.sampling
                tokens[i] = int(sample(logits[i:i + 1], temperature=p.temperature, top_k=p.top_k, top_p=p.top_p,
                                       generator=r.generator)[0])
        return tokens


# ---- driving an engine with a trace ---------------------------------------------------------

class ManualClock:
    """A clock that moves only when told: `clock()` reads it, `clock.sleep(dt)` advances it.
    Pass it as the engine's clock and `sleep` to `replay` for a deterministic replay."""

    def __init__(self, start: float = 0.0):
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot sleep a negative time, got {seconds}")
        self.now += seconds


@dataclass
class RunResult:
    """A replayed trace: the requests (trace order), the engine's step log, the run's span."""

    name: str
    requests: list[Request]
    steps: list[StepRecord]
    start: float
    end: float
    max_batch_size: int

    def summary(self) -> dict[str, float]:
        return summarize(self)


def replay(engine: Engine, trace: Trace, *, sampling: SamplingParams | None = None, stop: Iterable[int] = (),
           sleep: Callable[[float], None] = time.sleep, step_time: float | None = None,
           name: str | None = None) -> RunResult:
    """Serve `trace` through `engine` against its clock, until every request has finished.

    A request is visible to the scheduler once its arrival offset has elapsed since the
    start; its arrival time is the offset's instant (so a request that arrived during a
    long step is charged the wait). When the engine can do nothing, the loop sleeps until
    the next arrival or the scheduler's `wake_time`. `step_time`: simulated time — with a
    `ManualClock`, charge this many seconds after each model step (so a step's events
    carry the time at which it started).
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a solutions.workload.Trace, got {type(trace).__name__}")
    if step_time is not None and not step_time >= 0:
        raise ValueError(f"step_time must be None or >= 0 seconds, got {step_time!r}")
    stop = tuple(stop)
    t0 = engine.clock()
    requests: list[Request] = []
    i = 0
    while i < len(trace) or engine.has_unfinished():
        now = engine.clock()
        while i < len(trace) and t0 + trace.requests[i].arrival <= now:
            tr = trace.requests[i]
            req = Request(tr.prompt, tr.max_new_tokens, sampling=sampling, stop=stop, request_id=f"{i}")
            requests.append(engine.add_request(req, arrival=t0 + tr.arrival))
            i += 1
        if engine.step().ran:
            if step_time:
                sleep(step_time)
            continue
        wake = [t for t in (engine.wake_time(), t0 + trace.requests[i].arrival if i < len(trace) else None)
                if t is not None]
        if not wake:
            if engine.has_unfinished():
                raise RuntimeError(f"{engine.scheduler!r} holds requests but will not run them: a scheduler bug")
            continue
        sleep(max(0.0, min(wake) - engine.clock()))
    end = max((r.events[-1].time for r in requests), default=t0)
    return RunResult(name or engine.scheduler.name, requests, list(engine.steps), t0, end,
                     engine.scheduler.max_batch_size)


def serve(model: GPT, trace: Trace, scheduler: Scheduler, **kw) -> RunResult:
    """A fresh engine for `scheduler`, replaying `trace` in real time (see `replay`)."""
    engine_kw = {k: kw.pop(k) for k in ("max_len", "clock") if k in kw}
    return replay(Engine(model, scheduler, **engine_kw), trace, **kw)


# ---- 5.7 metrics ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RequestMetrics:
    """Latencies of one request, in seconds (None where they do not exist).

    queue: arrival -> first admitted.  ttft: arrival -> first output token.
    itl: the gaps between consecutive output tokens.  tpot: their mean (time per output
    token after the first).  e2e: arrival -> finished.
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    finish_reason: str | None
    queue: float | None
    ttft: float | None
    tpot: float | None
    e2e: float | None
    itl: tuple[float, ...]
    preemptions: int


def request_metrics(request: Request) -> RequestMetrics:
    """The metrics of one request, from its `events` and `token_times`."""
    # BEGIN SOLUTION 5.7
    arrival = request.arrival
    admitted = next((e.time for e in request.events if e.state is State.RUNNING), None)
    times = request.token_times
    return RequestMetrics(
        request_id=request.request_id,
        prompt_tokens=len(request.prompt),
        output_tokens=len(request.output),
        finish_reason=request.finish_reason,
        queue=None if admitted is None else admitted - arrival,
        ttft=times[0] - arrival if times else None,
        tpot=(times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None,
        e2e=request.events[-1].time - arrival if request.finished else None,
        itl=tuple(b - a for a, b in zip(times, times[1:])),
        preemptions=request.preemptions,
    )
    # END SOLUTION


def percentile(values: Iterable[float | None], q: float) -> float:
    """The q-th percentile (0..100, linear interpolation) of the values that are not None;
    NaN when there are none."""
    # BEGIN SOLUTION 5.7
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q!r}")
    xs = [v for v in values if v is not None]
    return float(np.percentile(xs, q)) if xs else float("nan")
    # END SOLUTION


def summarize(result: RunResult) -> dict[str, float]:
    """One run in numbers: requests completed and aborted, output tokens, seconds (first
    arrival to last finish), throughput `tokens_per_s`; p50/p99 in milliseconds of
    queue, ttft, tpot, itl (over every gap of every request) and e2e, over the requests
    that completed; and `occupancy`, the mean over steps of rows run / max_batch_size."""
    # BEGIN SOLUTION 5.7
    metrics = [request_metrics(r) for r in result.requests]
    done = [m for m in metrics if m.finish_reason in ("stop", "length")]
    tokens = sum(m.output_tokens for m in metrics)
    seconds = result.end - result.start
    row: dict[str, float] = {
        "requests": len(done),
        "aborted": sum(m.finish_reason == "abort" for m in metrics),
        "output_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds if seconds > 0 else float("nan"),
    }
    series = {"queue": [m.queue for m in done], "ttft": [m.ttft for m in done], "tpot": [m.tpot for m in done],
              "itl": [g for m in done for g in m.itl], "e2e": [m.e2e for m in done]}
    for name, values in series.items():
        for q in (50, 99):
            row[f"{name}_p{q}_ms"] = 1e3 * percentile(values, q)
    rows = [s.rows for s in result.steps]
    row["occupancy"] = float(np.mean(rows)) / result.max_batch_size if rows else float("nan")
    return row
    # END SOLUTION


def format_table(rows: dict[str, dict[str, float]],
                 columns: Sequence[str] = ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
                                           "tpot_p99_ms", "itl_p99_ms", "occupancy")) -> str:
    """{run name: summary} as an aligned text table."""
    head = ["run", *columns]
    def cell(v) -> str:
        return str(v) if not isinstance(v, float) else f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"

    body = [[name, *(cell(s[c]) for c in columns)] for name, s in rows.items()]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    line = lambda r: "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, body)])


# ---- demo ------------------------------------------------------------------------------------

def default_model() -> tuple[GPT, str]:
    """(the course's default model, its description), or — while it has not been trained —
    a random-init model of the same shape (seed 0), which batches exactly the same way."""
    if DEFAULT_WEIGHTS.exists():
        model, _ = load_default()
        return model, "the course's default model"
    torch.manual_seed(0)
    return GPT(GPTConfig()).eval(), f"a random-init GPT (seed 0; {DEFAULT_WEIGHTS.name} is not trained yet)"


@on_one_thread
def demo() -> None:
    """Serve one trace with static, dynamic and continuous batching, and compare."""
    torch.manual_seed(0)
    model, what = default_model()
    tok = ByteTokenizer()
    text = Path(abc.__file__).read_text(encoding="utf-8")  # prompts cut from real Python source
    trace = make_trace(24, profile="mix", rate=100.0, seed=0, source=tok.encode(text))
    print(f"model: {what}, {model.num_params():,} parameters; 1 torch thread")
    print(f"trace: {trace.describe()}\n")
    runs = {}
    for scheduler in (StaticBatching(8), DynamicBatching(8, max_wait_ms=20), ContinuousBatching(8),
                      ContinuousBatching(8, max_tokens_per_step=32)):
        runs[scheduler.name] = serve(model, trace, scheduler)
    alone = [generate(model, [list(r.prompt)], r.max_new_tokens).tokens[0] for r in runs["static"].requests]
    summaries = {name: run.summary() for name, run in runs.items()}
    print(format_table(summaries))
    ratio = summaries["continuous"]["tokens_per_s"] / summaries["static"]["tokens_per_s"]
    print(f"\ntimes in ms; occupancy = rows doing work / 8. continuous / static throughput: {ratio:.2f}x")
    same = all([r.output for r in run.requests] == alone for run in runs.values())
    print(f"every policy gave every request the tokens stage 04's generate gives it alone: {same}")
