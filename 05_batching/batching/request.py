# GENERATED from solutions/batching/request.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 05_batching/05_batching.ipynb. Exercises in this file (line of each hole, then the commands):
#   5.1 The request lifecycle: lines 37, 47; `course check 5.1`, `course hint 5.1`
"""Request: one generation request, its state machine and timestamps (exercise 5.1)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import torch

from solutions.checks import check_int, is_int

from .sampling_params import SamplingParams
from .state import TRANSITIONS, Event, IllegalTransition, State


class Request:
    """One generation request and everything that happens to it (attributes: `__init__`).

    Its known tokens are `prompt + output`; `num_computed` of them have their K/V in the
    cache. `events` timestamps every state change; `token_times[i]` is when `output[i]`
    was made.
    """

    def transition(self, to: State, now: float, reason: str | None = None) -> None:
        """Move to state `to` (a State, or its value: "finished") at time `now`.

        Legal moves are the keys of TRANSITIONS. A move to FINISHED needs one of the reasons
        TRANSITIONS lists for it and sets `finish_reason`; any other move takes reason None.
        A legal move sets `state` and appends `Event(now, to, reason)` to `events`. Raises
        IllegalTransition, its message starting "request <request_id>: ", for an illegal move,
        a wrong or missing reason, or `now` earlier than the last event's time (the same
        instant is fine); a refused move changes nothing.
        """
        raise NotImplementedError('Exercise 5.1: The request lifecycle — see 05_batching.ipynb')

    def append_token(self, token: int, now: float) -> str | None:
        """Record a token sampled at time `now`; return the finish reason it causes, if any.

        A token in `stop` returns "stop" and is NOT kept: `output` and `token_times` stay as
        they were (as in stage 04's `generate`). Any other token is appended to `output`,
        `now` to `token_times`; then "length" if `output` holds `max_new_tokens` tokens, else
        None. It never changes `state` (the engine makes the FINISHED move).
        """
        raise NotImplementedError('Exercise 5.1: The request lifecycle — see 05_batching.ipynb')

    # ---- given: the request's data, and what follows from it ---------------------------------

    def __init__(self, prompt: Sequence[int], max_new_tokens: int = 16, *,
                 sampling: SamplingParams | None = None, stop: Iterable[int] = (), priority: int = 0,
                 request_id: str | None = None, arrival: float | None = None, client: str = ""):
        """A WAITING request with no events yet (`Engine.add_request` records the first).

        request_id   "req-<n>" unless given (a str)
        prompt       tuple of token ids (non-empty; ints >= 0)
        max_new_tokens, sampling (default greedy), stop (frozenset of token ids; empty when
                     sampling.ignore_eos), priority
                     (an int, lower runs first), arrival (clock time; the engine sets it),
                     client (a str naming who sent it, "" for nobody in particular: a
                     scheduler that shares the engine fairly between clients reads it)
        seq          the engine's arrival counter, breaking ties in `order`
        state, events, finish_reason   the state machine (5.1)
        output, token_times            the tokens made so far and when
        num_computed  known tokens whose K/V are in the cache; slot: its cache row while
                     RUNNING (else None); generator: its own torch.Generator when it samples;
                     preemptions: how many times it was preempted
        logprobs     one `logprobs.TokenLogprob` per output token when sampling.logprobs
                     is set (else None); prompt_logprobs: the prompt's (its first None),
                     computed once its prompt has run, when sampling.prompt_logprobs is set
        Bad arguments raise ValueError naming them (TypeError for `sampling`).
        """
        if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence) or len(prompt) == 0:
            raise ValueError(f"prompt must be a non-empty sequence of token ids, got {prompt!r:.80}")
        if not all(is_int(t) and t >= 0 for t in prompt):
            raise ValueError(f"prompt must hold non-negative int token ids, got {list(prompt)!r:.80}")
        check_int("max_new_tokens", max_new_tokens, 1)
        stop = (stop,) if is_int(stop) or isinstance(stop, bool) else tuple(stop)
        if not all(is_int(t) and t >= 0 for t in stop):
            raise ValueError(f"stop must be token ids (non-negative ints), got {stop!r}")
        if not is_int(priority):
            raise ValueError(f"priority must be an int (lower runs first), got {priority!r}")
        if not isinstance(client, str):
            raise ValueError(f"client must be a str, got {client!r:.80}")
        if sampling is not None and not isinstance(sampling, SamplingParams):
            raise TypeError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
        self.request_id = f"req-{next(_request_ids)}" if request_id is None else str(request_id)
        self.prompt = tuple(int(t) for t in prompt)
        self.max_new_tokens = int(max_new_tokens)
        self.sampling = sampling or SamplingParams()
        # ignore_eos (vLLM's): nothing stops it but max_new_tokens
        self.stop = frozenset() if self.sampling.ignore_eos else frozenset(int(t) for t in stop)
        self.priority = int(priority)
        self.client = client
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
        self.logprobs: list | None = None if self.sampling.logprobs is None else []
        self.prompt_logprobs: list | None = None

    # -- what it knows and what is left to compute
    @property
    def tokens(self) -> list[int]:
        return [*self.prompt, *self.output]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def num_pending(self) -> int:
        """Known tokens whose K/V are not in the cache yet: the whole prompt at first (prefill,
        maybe in chunks), then one per step (decode: the token sampled last step). A
        preempted request loses its cache, so prompt + output are recomputed in one prefill."""
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

    def __repr__(self) -> str:
        return (f"Request({self.request_id!r}, {self.state.value}, prompt={len(self.prompt)}, "
                f"output={len(self.output)}/{self.max_new_tokens}, computed={self.num_computed})")


_request_ids = itertools.count()
