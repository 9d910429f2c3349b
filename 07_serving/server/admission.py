# GENERATED from solutions/server/admission.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 07_serving/07_serving.ipynb. Exercises in this file (line of each hole, then the commands):
#   7.2 Admission control by KV blocks: 503 + Retry-After: lines 40, 47; `course check 7.2`, `course hint 7.2`
"""7.2 Admission control by KV blocks: a 503 + Retry-After before any work is done."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from solutions.checks import check_int, is_number
from solutions.paged import blocks_needed

from .protocol import APIError, GenerationRequest, bad


class AdmissionControl:
    """Admit requests by the KV memory they may need (`num_blocks` blocks of `block_size`
    tokens), not by how many they are. An admitted request reserves its worst case; at most
    `capacity_blocks` (the memory plus a queue, given code below) are reserved at once.
    Counters: `reserved_blocks`, `reserved_tokens`, `admitted`, `rejected`; `draining` (set at
    shutdown) refuses all. Thread-safe (`self._lock`): the event loop admits, the engine
    thread releases."""

    def admit(self, prompt_tokens: int, max_tokens: int, n: int = 1) -> Ticket:
        """Reserve a request's worst case: `Ticket(blocks, tokens)`, blocks = `request_blocks(
        prompt_tokens, max_tokens, n, block_size)`, tokens n * (prompt_tokens + max_tokens);
        `reserved_blocks`/`reserved_tokens` grow by them, `admitted` by one. Raises APIError,
        reserving nothing: 400, param "max_tokens", code "kv_cache_too_small" for more blocks
        than `num_blocks` (never fits; not in `rejected`); 503, code "shutting_down" while
        `draining`; 503, code "overloaded" when `reserved_blocks` + its blocks would pass
        `capacity_blocks` (exactly full admits). Both 503s: type "service_unavailable_error",
        header `Retry-After` = str(retry_after_s), `rejected` += 1. When several apply, the
        one that tells the client most wins: never-fits (retrying cannot help) over draining
        over overloaded. No admit or release sees the counters halfway through another's
        change (two admits never both take the last free blocks)."""
        raise NotImplementedError('Exercise 7.2: Admission control by KV blocks: 503 + Retry-After — see 07_serving.ipynb')

    def release(self, ticket: Ticket) -> None:
        """Hand a ticket's reservation back: `reserved_blocks` and `reserved_tokens` shrink by
        its blocks and tokens, and the ticket is marked `released`. A ticket is handed back at
        most once: releasing a released ticket changes nothing, also when two threads release
        it at the same time. Thread-safe with `admit`."""
        raise NotImplementedError('Exercise 7.2: Admission control by KV blocks: 503 + Retry-After — see 07_serving.ipynb')

    # -- given: construction and capacity
    def __init__(self, *, num_blocks: int, block_size: int, max_queue_tokens: int, retry_after_s: int = 1,
                 max_wait_s: float | None = None, rate_window_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, degrade_watermark: float | None = None,
                 degraded_max_tokens: int = 32):
        """`max_queue_tokens`: the queue beyond the memory that is always allowed (tokens of
        reservations; with `max_wait_s` None, the whole rule). `max_wait_s`: the longest a
        request should wait to start; the queue then grows to what the server is measured
        to serve in that time (`capacity_blocks`). `clock` (seconds) times the service.
        `degrade_watermark` (a fraction of the memory, or None: never) and
        `degraded_max_tokens`: degradation before refusal (`granted_max_tokens`)."""
        self.num_blocks = check_int("num_blocks", num_blocks, 1)
        self.block_size = check_int("block_size", block_size, 1)
        self.max_queue_tokens = check_int("max_queue_tokens", max_queue_tokens, 0)
        self.retry_after_s = check_int("retry_after_s", retry_after_s, 1)
        if max_wait_s is not None and not (is_number(max_wait_s) and max_wait_s >= 0):
            raise ValueError(f"max_wait_s must be None or a number of seconds >= 0, got {max_wait_s!r}")
        if not (is_number(rate_window_s) and rate_window_s > 0):
            raise ValueError(f"rate_window_s must be a number of seconds > 0, got {rate_window_s!r}")
        self.max_wait_s, self.rate_window_s, self.clock = max_wait_s, float(rate_window_s), clock
        if degrade_watermark is not None and not (is_number(degrade_watermark) and 0 < degrade_watermark <= 1):
            raise ValueError(f"degrade_watermark must be None or a fraction in (0, 1], got {degrade_watermark!r}")
        self.degrade_watermark = degrade_watermark
        self.degraded_max_tokens = check_int("degraded_max_tokens", degraded_max_tokens, 1)
        self.reserved_blocks = 0
        self.reserved_tokens = 0
        self.admitted = 0
        self.rejected = 0
        self.draining = False
        self._lock = threading.Lock()
        self._served: collections.deque[tuple[float, int]] = collections.deque()  # (time, blocks handed back)
        self._served_blocks = 0
        self._since = clock()
        self._rate_lock = threading.Lock()  # not self._lock: capacity_blocks is read while admit holds that
        self.held_by: collections.Counter[str] = collections.Counter()  # client -> blocks its tickets reserve
        self._allowance = 0  # fair_allowance of the client being admitted, during admit_batch only

    def admit_batch(self, prompt_tokens: list[int], max_tokens: int, n: int = 1, client: str = "",
                    deadline_s: float | None = None) -> Ticket:
        """One request of `client` holding several prompts (a list of prompts in
        /v1/completions): admitted whole, with one Ticket reserving the sum of `admit`'s for
        each prompt, or refused whole (the error of the first prompt refused, nothing
        reserved); counted once in `admitted` or `rejected`, as one request. Its client may
        reserve beyond the capacity by its `fair_allowance`. A request whose `deadline_s` (its
        shortest deadline, seconds from now) comes before it is expected to start
        (`expected_wait_s`) is refused, not served late: 503, code "deadline_unmeetable",
        counted in `rejected` (unless it never fits or the server drains: those refusals
        tell the client more). The event loop is the only thread that admits, so nobody sees
        the counters between two of its prompts."""
        tickets: list[Ticket] = []
        self._allowance = self.fair_allowance(client)
        try:
            if deadline_s is not None:
                self._refuse_if_late(prompt_tokens, max_tokens, n, deadline_s)
            for length in prompt_tokens:
                tickets.append(self.admit(length, max_tokens, n))
        except APIError:
            for t in tickets:
                self.release(t)
            with self._lock:
                self.admitted -= len(tickets)
            raise
        finally:
            self._allowance = 0
        with self._lock:
            self.admitted -= len(tickets) - 1
            self.held_by[client] += sum(t.blocks for t in tickets)
        return Ticket(sum(t.blocks for t in tickets), sum(t.tokens for t in tickets), client=client)

    def granted_max_tokens(self, prompt_tokens: list[int], max_tokens: int, n: int = 1, min_tokens: int = 0) -> int:
        """Degradation before refusal: the `max_tokens` a request is given. When the
        reservations, this request's worst case at the `max_tokens` it asked included, would
        pass `degrade_watermark` of the KV memory, it gets `degraded_max_tokens` (never fewer
        than its `min_tokens`, never more than it asked): shorter answers for the newcomers
        before a 503 for some. Since the watermark is at most the memory, a request that
        would be refused as asked is shortened first, and only refused if it is still too
        big. Below the watermark, or without one (None), what it asked."""
        floor = max(self.degraded_max_tokens, min_tokens)
        if self.degrade_watermark is None or max_tokens <= floor:
            return max_tokens
        need = sum(request_blocks(length, max_tokens, n, self.block_size) for length in prompt_tokens)
        with self._lock:
            past = self.reserved_blocks + need > self.degrade_watermark * self.num_blocks
        return floor if past else max_tokens

    def expected_wait_s(self, need: int) -> float:
        """Seconds a request of `need` blocks is expected to wait before it starts: the
        blocks reserved beyond the memory, its own included (`reserved_blocks` + need -
        `num_blocks`), at the measured `service_rate`. 0 when it fits the memory now, or when
        nothing has been measured yet."""
        with self._lock:
            ahead = self.reserved_blocks + need - self.num_blocks
        rate = self.service_rate()
        return ahead / rate if ahead > 0 and rate > 0 else 0.0

    def _refuse_if_late(self, prompt_tokens: list[int], max_tokens: int, n: int, deadline_s: float) -> None:
        needs = [request_blocks(length, max_tokens, n, self.block_size) for length in prompt_tokens]
        if self.draining or max(needs) > self.num_blocks or self._allowance:
            return  # admit's own refusals say more; a client with a fair allowance goes ahead of the queue
        wait = self.expected_wait_s(sum(needs))
        if wait > deadline_s:
            with self._lock:
                self.rejected += 1
            raise APIError(503, f"this request is expected to wait {wait:.1f} s before it starts, past its "
                                f"deadline of {deadline_s:g} s; retry later", type="service_unavailable_error",
                           code="deadline_unmeetable", headers={"Retry-After": str(self.retry_after_s)})

    def fair_allowance(self, client: str) -> int:
        """Fairness at admission: blocks `client` may reserve beyond the capacity. A client
        holding less than its fair share, the memory plus the queue divided among the clients
        holding reservations (itself included), may reserve until it holds that share: a
        flood that filled the queue does not get a quiet client refused, and the fair
        scheduler (fairness.py) starts that client's requests ahead of the flood's queue.
        A lone client, or one at its share, has none: one client alone sees the plain rule."""
        plain = self.num_blocks + self.queue_blocks
        with self._lock:
            others = sum(1 for c, blocks in self.held_by.items() if blocks > 0 and c != client)
            held_by_others = self.reserved_blocks - self.held_by[client]
        if not others:
            return 0
        return max(0, held_by_others + plain // (others + 1) - plain)  # room until it holds its share

    def served(self, ticket: Ticket) -> None:
        """The engine thread, when a request leaves the engine (finished, stopped, aborted):
        hand its reservation back (`release`) and count its blocks as served now, for the
        service rate."""
        if not ticket.released:
            with self._lock:
                self.held_by[ticket.client] -= ticket.blocks
                if self.held_by[ticket.client] <= 0:
                    del self.held_by[ticket.client]
        self.release(ticket)
        with self._rate_lock:
            self._served.append((self.clock(), ticket.blocks))
            self._served_blocks += ticket.blocks

    def service_rate(self) -> float:
        """KV blocks handed back per second, measured over the last `rate_window_s` seconds
        (over the time since this admission control was made, at least 1 s, while that is
        shorter): the rate at which the queue's reservations can start."""
        now = self.clock()
        with self._rate_lock:
            while self._served and self._served[0][0] < now - self.rate_window_s:
                self._served_blocks -= self._served.popleft()[1]
            span = min(self.rate_window_s, max(1.0, now - self._since))
            return self._served_blocks / span

    @property
    def queue_blocks(self) -> int:
        """Blocks that may wait beyond the memory: "queue length = throughput x acceptable
        wait". A request queued behind them starts once that many blocks have been handed
        back, within `max_wait_s` at the measured `service_rate`; never fewer than
        `max_queue_tokens` allow (what a server with no measurement yet may queue)."""
        floor = self.max_queue_tokens // self.block_size
        if self.max_wait_s is None:
            return floor
        return max(floor, int(self.service_rate() * self.max_wait_s))

    @property
    def capacity_blocks(self) -> int:
        """Blocks that may be reserved at once: the memory plus the queue (`queue_blocks`),
        plus, while `admit_batch` admits a client's request, that client's `fair_allowance`."""
        return self.num_blocks + self.queue_blocks + self._allowance


@dataclass
class Ticket:
    """What an admitted request reserved; handed back with `AdmissionControl.release`."""

    blocks: int
    tokens: int
    released: bool = False
    client: str = ""  # who reserved it (AdmissionControl.held_by)


DEGRADED_HEADER = "X-Degraded"  # the response header that says a request was shortened (`degrade`)


def degrade(admission: AdmissionControl, gen: GenerationRequest) -> tuple[GenerationRequest, dict[str, str]]:
    """`gen` with the `max_tokens` admission grants it (`granted_max_tokens`), and the
    response headers that tell the client: `X-Degraded: max_tokens=<granted>;
    asked=<asked>; watermark=<fraction>` when it was shortened, none otherwise."""
    granted = admission.granted_max_tokens([len(p) for p in gen.batch], gen.max_tokens, gen.n, gen.min_tokens)
    if granted >= gen.max_tokens:
        return gen, {}
    said = f"max_tokens={granted}; asked={gen.max_tokens}; watermark={admission.degrade_watermark:g}"
    return replace(gen, max_tokens=granted), {DEGRADED_HEADER: said}


def request_blocks(prompt_tokens: int, max_tokens: int, n: int, block_size: int) -> int:
    """KV blocks a request may hold at worst: n sequences of prompt + max_tokens tokens,
    whose FULL prompt blocks are shared by copy-on-write (stage 06's fork), so they count
    once; every sequence owns the rest (`solutions.paged.blocks_needed` of its tokens)."""
    full_prompt = prompt_tokens // block_size
    return full_prompt + n * (blocks_needed(prompt_tokens + max_tokens, block_size) - full_prompt)
