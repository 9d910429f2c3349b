# GENERATED from solutions/batching/engine.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 05_batching/05_batching.ipynb. Exercises in this file (line of each hole, then the commands):
#   5.6 Preemption, requeue and abort: lines 40, 49; `course check 5.6`, `course hint 5.6`
"""Engine: the model, the stage-04 cache and a scheduler; one step at a time (5.6: abort, and
taking a preempted request back into the queue)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import torch

from solutions.checks import check_int
from solutions.kv_cache import Decoder, KVCache, check_decoder, embedding

from .logprobs import TokenLogprob, prompt_logprobs, sample_logprobs
from .model_runner import forward_chunks, sample_tokens
from .outputs import StepOutput, StepRecord
from .request import Request
from .scheduler import Scheduler
from .state import Event, State


class Engine:
    """The model, a KV cache with one row per batch slot, and a scheduler; `step()` runs one
    scheduled step, `add_request` / `abort` / `forget` act between steps. A running request
    owns a cache row (`request.slot`, from `free_slots`); once it finishes, is preempted or
    aborted the row is reset and free. `clock` stamps every event (a `ManualClock` for tests).
    """

    def abort(self, request_id: str) -> bool:
        """Abort request `request_id` in any state: True, and then it is in neither queue of
        the scheduler, holds no cache row (one it held is reset and free) and is FINISHED,
        reason "abort", at `self.clock()`; False, changing nothing, if it had already
        finished. An unknown id is a ValueError ("no request ...")."""
        if request_id not in self.requests:
            raise ValueError(f"no request with id {request_id!r} in this engine")
        raise NotImplementedError('Exercise 5.6: Preemption, requeue and abort — see 05_batching.ipynb')

    def _requeue(self, request: Request, now: float) -> None:
        """Take back a victim of the scheduler's `preempt` (PREEMPTED, already out of
        `running`) at time `now`, the start of the step. Afterwards it holds no cache row (the
        row is reset and free, its K/V forgotten, `num_computed` 0, so it will recompute
        prompt + output in one prefill), its `preemptions` has grown by one, it is WAITING at
        `now`, and it is back in the scheduler's waiting queue at its old place (the queue is
        kept in `Request.order`, which its arrival still sets)."""
        raise NotImplementedError('Exercise 5.6: Preemption, requeue and abort — see 05_batching.ipynb')

    # ---- given ----------------------------------------------------------------------------------

    def __init__(self, model: Decoder, scheduler: Scheduler, *, max_len: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        """`max_len`: positions per cache row, default the model's context. The scheduler's
        `max_cache_tokens` (default: the whole cache, rows x max_len) is the memory budget it
        schedules against — stage 06 makes that budget physical with paged blocks."""
        check_decoder(model)
        if not isinstance(scheduler, Scheduler):
            raise TypeError(f"scheduler must be a Scheduler, got {type(scheduler).__name__}")
        if scheduler.has_unfinished():
            raise ValueError("the scheduler already holds requests; give each engine a fresh scheduler")
        context = model.config.block_size  # max_len is at most the model's context
        max_len = check_int("max_len", context if max_len is None else max_len, 1, context)
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
        self.device = embedding(model).device
        self.free_slots = list(range(scheduler.max_batch_size))
        self.dead_rows: list[Request] = []  # a fixed-shape batch's finished rows, still computed
        self.requests: dict[str, Request] = {}
        self.steps: list[StepRecord] = []
        self._seq = itertools.count()
        self._logprobs: dict[str, TokenLogprob] = {}  # this step's, for `_retire` (logprobs.py)

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

    # -- one step: plan, run, retire (nano-vllm's `schedule` -> `run` -> `postprocess`)
    def step(self) -> StepOutput:
        """One step: plan it (the scheduler's plan, cache rows freed and assigned), run it (the
        model once over the planned chunks, one token sampled per ready request), retire it
        (tokens appended, finished requests out) and record it in `steps`."""
        start = self.clock()
        plan = self._plan(start)
        if not plan.chunks:
            return StepOutput(ran=False, preempted=plan.preempted)
        decode_rows, dead_rows = sum(1 for r, _ in plan.chunks if r.phase == "decode"), len(self.dead_rows)
        ready, tokens = self._run(plan.chunks)
        now = self.clock()
        out = self._retire(ready, tokens, now, plan.preempted)
        self.steps.append(StepRecord(
            start, now, rows=len(plan.chunks), dead_rows=dead_rows, decode_rows=decode_rows,
            prefill_tokens=plan.num_tokens - decode_rows, running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting), cached_tokens=self._cached_tokens()))
        return out

    def _plan(self, now: float):
        """The scheduler's plan for the step starting at `now`, its memory moves done: the
        preempted requeued (`_requeue`), the admitted given a cache row (`_acquire`), and the
        chunks cut to what is still pending once `_acquire` found tokens already cached
        (stage 06's prefix cache); chunks with nothing left are dropped."""
        self._end_fixed_batch()
        plan = self.scheduler.schedule(now)
        for request in plan.preempted:
            self._requeue(request, now)
        for request in plan.admitted:
            self._acquire(request)
        if plan.admitted:
            plan.chunks = [(r, min(n, r.num_pending)) for r, n in plan.chunks if min(n, r.num_pending) > 0]
        return plan

    def _run(self, chunks: list[tuple[Request, int]]) -> tuple[list[Request], list[int]]:
        """The model once over `chunks` (and a fixed-shape batch's dead rows, whose output is
        thrown away), then one token sampled per ready request: (ready, tokens)."""
        with torch.no_grad():
            ready, logits = self._forward(chunks + [(row, 1) for row in self.dead_rows])
            live = [i for i, r in enumerate(ready) if r not in self.dead_rows]
            ready = [ready[i] for i in live]
            tokens = self._sample(ready, logits[live])
        for row in self.dead_rows:  # recompute the same position again next step
            row.num_computed -= 1
            self.cache.lengths[row.slot] -= 1
        return ready, tokens

    def _retire(self, ready: list[Request], tokens: list[int], now: float,
                preempted: list[Request]) -> StepOutput:
        """Append each ready request's token at `now`; a request that finished (length or stop:
        a stop token is not streamed) leaves the scheduler, gives its row back (or, in a
        fixed-shape batch, to a dead row) and is FINISHED. Returns the step's output."""
        out = StepOutput(ran=True, preempted=preempted)
        for request, token in zip(ready, tokens):
            reason = request.append_token(token, now)
            if reason != "stop":
                out.tokens.append((request, token))
                if request.logprobs is not None:  # asked for: the kept token's entry
                    request.logprobs.append(self._logprobs[request.request_id])
            if reason is not None:
                self.scheduler.remove(request)
                if self.scheduler.fixed_shape:
                    self.dead_rows.append(self._dead_row(request))
                else:
                    self._release(request)
                request.transition(State.FINISHED, now, reason)
                out.finished.append(request)
        self._end_fixed_batch()
        return out

    def _cached_tokens(self) -> int:
        """Tokens in the cache now (`cache.lengths.sum()`), counted on the host: every row is
        held by a running request or a dead row, and holds exactly its `num_computed` tokens."""
        return sum(r.num_computed for r in (*self.scheduler.running, *self.dead_rows) if r.slot is not None)

    def _forward(self, chunks: list[tuple[Request, int]]) -> tuple[list[Request], torch.Tensor]:
        """The planned chunks through the model against this engine's cache: (ready, logits),
        see `model_runner.forward_chunks` (5.2). Stage 06's PagedEngine extends it."""
        return forward_chunks(self.model, self.cache, chunks)

    def _sample(self, requests: list[Request], logits: torch.Tensor) -> list[int]:
        """Next token per request with its own sampling parameters (`sample_tokens`); for the
        requests that ask, log-probabilities of the raw `logits` (logprobs.py): the sampled
        token's (kept for `_retire`) and, once, the prompt's. Nothing more for the others."""
        tokens = sample_tokens(requests, logits)
        self._logprobs.clear()
        rows = [i for i, r in enumerate(requests) if r.sampling.logprobs is not None]
        if rows:
            picked = torch.tensor(rows, device=logits.device)
            entries = sample_logprobs(logits[picked], [tokens[i] for i in rows],
                                      [requests[i].sampling.logprobs or 0 for i in rows])
            self._logprobs.update((requests[i].request_id, e) for i, e in zip(rows, entries))
        scored: dict[tuple, list] = {}  # n forks of one prompt: scored once
        for r in requests:
            k = r.sampling.prompt_logprobs
            if k is not None and r.prompt_logprobs is None:
                key = (r.prompt, k)
                if key not in scored:
                    scored[key] = prompt_logprobs(self.model, r.prompt, k)
                r.prompt_logprobs = scored[key]
        return tokens
