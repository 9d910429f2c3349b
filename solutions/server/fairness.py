"""Fairness between clients (given code): one client's flood must not take the engine from
everybody else.

The source's outage was one user sending 1,000 concurrent requests. Under first come, first
served a request waits behind every request that arrived before it, whoever sent them, so a
quiet client's request waits behind the whole flood. `FairBatching` shares the engine
between clients (`Request.client`; the server sets it from the request's `user` field) by
max-min fairness over KV memory: whenever the engine chooses between clients, the client
that holds the least memory now goes first.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection

from solutions.batching import ContinuousBatching, Request, SchedulerOutput, State


class FairBatching(ContinuousBatching):
    """Stage 05's continuous batching (chunked prefill, preemption) shared fairly between
    clients. A client's `usage()` is the cache tokens its running requests know
    (`tokens_needed`). Each choice stage 05 makes in queue order (`Request.order`: priority,
    then arrival) is made here by `rank` = (priority, the client's usage, order): between two
    clients of one priority the one holding less memory wins; a client's own requests keep
    their queue order. With one client this is stage 05's scheduler, step for step.

    - admission: the waiting request of least rank goes next, while it fits;
    - the step's token budget: decodes first (each needs its one token), then each client's
      first prefill, least-served client first, then each client's second, and so on; but a
      step in which a client with nothing decoding has a prefill runs those prefills alone
      (never two such steps in a row);
    - memory preemption: the victim is the running request of greatest rank, and the same
      step admits the other clients' waiting requests (not the victims' client's);
    - fairness preemption: when the next waiting request W (of client c) does not fit, running
      requests of the client holding the most memory are preempted, latest first, while that
      client holds more than c would hold with W (usage[c] + need(W)), until W fits; the same
      step admits W (and goes on admitting in fair order). Stage 05's rule that a preempting
      step admits nobody is against thrashing and against a newcomer overtaking its victim;
      here overtaking is the point, and it cannot thrash: afterwards c holds less than the
      victim's client held, so the victim never outranks W.

    So a quiet client's request starts in the first step after it arrives, however many
    requests another client keeps queued (tests: 07_serving/tests/test_server_fairness.py).
    """

    name = "continuous+fair"
    _newcomers_alone = False  # whether the last plan ran newcomers' prefills alone (plan_chunks)

    def usage(self) -> Counter[str]:
        """Cache tokens each client's running requests know (clients with none are absent)."""
        used: Counter[str] = Counter()
        for r in self.running:
            used[r.client] += self.tokens_needed(r)
        return used

    @staticmethod
    def rank(request: Request, usage: Counter[str]) -> tuple:
        """The fair order: priority, then the client's usage, then the queue order."""
        return (request.priority, usage[request.client], request.order)

    def schedule(self, now: float) -> SchedulerOutput:
        """Stage 05's step, with two more checks. A step whose next waiting request does not
        fit may preempt for fairness, and then admits it at once. A step that must preempt
        for memory (stage 05's, whose victims are here the richest client's) admits, in the
        same step, after any fairness preemption, the waiting requests of the OTHER clients:
        stage 05's rule against thrashing, a preempting step admits nobody, still holds for
        the victims' clients, but a quiet client does not wait out a flood's memory pressure."""
        if not self.waiting:
            return super().schedule(now)
        out = SchedulerOutput()
        if self.tokens_held() > self._capacity():
            self.preempt(now, out)
            victims = {r.client for r in out.preempted}
            self.preempt_for_fairness(now, out, skip=victims)
            self.admit_fcfs(now, out, skip=victims)
        elif self.preempt_for_fairness(now, out):
            self.admit_fcfs(now, out)
        else:
            return super().schedule(now)
        out.chunks = self.plan_chunks()
        return out

    def admit_fcfs(self, now: float, out: SchedulerOutput, skip: Collection[str] = ()) -> None:
        """Admission in fair order: the waiting request of least `rank` next, while it fits
        (nobody overtakes it, as under FCFS), the clients in `skip` left waiting. Each
        client's queue is read once a step."""
        usage = self.usage()
        queues: dict[str, list[Request]] = defaultdict(list)
        for r in sorted(self.waiting, key=lambda r: self.rank(r, usage), reverse=True):  # each client's, head last
            if r.client not in skip:
                queues[r.client].append(r)
        while queues:
            head = min((q[-1] for q in queues.values()), key=lambda r: self.rank(r, usage))
            if not self.fits(head):
                return
            queues[head.client].pop()
            if not queues[head.client]:
                del queues[head.client]
            self.waiting.remove(head)
            head.transition(State.RUNNING, now)
            self.running.append(head)
            out.admitted.append(head)
            usage[head.client] += self.tokens_needed(head)

    def preempt_for_fairness(self, now: float, out: SchedulerOutput, skip: Collection[str] = ()) -> bool:
        """If the next waiting request W (of a client not in `skip`, who will not be admitted
        this step) does not fit, preempt (into `out.preempted`, latest first) the running
        requests of the client holding the most memory while it holds more than W's client
        would with W, until W fits. Whether any was preempted."""
        usage = self.usage()
        head = min((r for r in self.waiting if r.client not in skip), key=lambda r: self.rank(r, usage), default=None)
        if head is None:
            return bool(out.preempted)
        after = usage[head.client] + self.tokens_needed(head)
        while not self.fits(head):
            richest = max((c for c in usage if c != head.client), key=lambda c: usage[c], default=None)
            if richest is None or usage[richest] <= after:
                break
            victim = max((r for r in self.running if r.client == richest), key=lambda r: r.order)
            self._preempt(victim, now, out)
            usage[richest] -= self.tokens_needed(victim)
            if not usage[richest]:
                del usage[richest]
        return bool(out.preempted)

    def preempt(self, now: float, out: SchedulerOutput) -> None:
        """Stage 05's memory preemption (as few as it takes, one at a time), each victim the
        running request of greatest `rank`: the client holding the most memory loses first."""
        usage = self.usage()
        while self.running and self.tokens_held() > self._capacity():
            victim = max(self.running, key=lambda r: self.rank(r, usage))
            self._preempt(victim, now, out)
            usage[victim.client] -= self.tokens_needed(victim)

    def _capacity(self) -> int:
        if self.max_cache_tokens is None:
            raise RuntimeError("max_cache_tokens is unset: an engine sets it before its first step")
        return self.max_cache_tokens

    def _preempt(self, victim: Request, now: float, out: SchedulerOutput) -> None:
        self.running.remove(victim)
        victim.transition(State.PREEMPTED, now)
        out.preempted.append(victim)

    def plan_chunks(self) -> list[tuple[Request, int]]:
        """Stage 05's budget (decodes first, then prefills while tokens are left), with the
        prefills in fair order: each client's k-th prefill (in admission order) before any
        client's (k+1)-th, and within one round the client holding less memory first. A
        step in which a client with no decoding request (a newcomer: a quiet client's next
        request) has a prefill runs the newcomers' prefills alone, when another client is
        running: the newcomer's first token then costs a step of its own size, not one
        carrying every other client's rows, and those wait one step for it; never two such
        steps in a row (the plan remembers whether it made one), so a stream of newcomers
        at most halves the others' token rate."""
        if self.max_tokens_per_step is None:
            return super().plan_chunks()
        usage, nth = self.usage(), Counter[str]()
        decoding = {r.client for r in self.running if r.phase == "decode"}
        newcomers = {r.client for r in self.running if r.phase == "prefill"} - decoding
        alone = bool(newcomers) and len(usage) > len(newcomers) and not self._newcomers_alone
        self._newcomers_alone = alone
        rounds = []
        for i, r in enumerate(self.running):
            if r.phase == "prefill" and (r.client in newcomers or not alone):
                rounds.append((self.prefill_key(r, nth[r.client], usage, i), r))
                nth[r.client] += 1
        decodes = [] if alone else [r for r in self.running if r.phase == "decode"]
        order = decodes + [t[-1] for t in sorted(rounds, key=lambda t: t[0])]
        left, chunks = self.max_tokens_per_step, []
        for r in order:
            n = min(r.num_pending, left)
            if n:
                chunks.append((r, n))
                left -= n
        return chunks

    @staticmethod
    def prefill_key(request: Request, nth: int, usage: Counter[str], index: int) -> tuple:
        """The order of the step's prefills: the client's `nth` prefill (its round), then the
        client's usage, then the request's place among the running (`index`)."""
        return (nth, usage[request.client], index)
