"""7.3 Deadlines: a request past its first-token or total deadline is aborted and told (504)."""

from __future__ import annotations

from solutions.batching import Request

from .protocol import APIError


def deadline_reason(request: Request, now: float, *, first_token_s: float | None,
                    total_s: float | None) -> str | None:
    """Whether an unfinished engine request is past a deadline at time `now` (seconds,
    the engine's clock), measured from `request.arrival`: "first_token" when it has no
    output token yet and more than `first_token_s` have passed (this one wins when both
    apply), "total" when more than `total_s` have passed; None when it may go on.
    Exactly at a deadline is not past it; a deadline of None never expires; a finished
    request (or one without an arrival) is never late. Changes nothing. (The engine loop
    aborts a late request, its blocks freed at once, and tells the client: a 504, or a
    last stream event, `deadline_error`.)"""
    # BEGIN SOLUTION 7.3
    # DECISION: the boundaries and precedence: strictly past (>) a deadline, the first-token one
    #   only while no token exists and winning a tie, None never expiring, and what can never be
    #   late (finished, no arrival).
    # HINT: Rule out first what can never be late: `request.finished`, or no arrival.
    # HINT: The age is `now - request.arrival`; "past" is a strict `>`.
    # HINT: Check the first-token deadline (only while `request.output` is empty) before
    #   the total one, so that it wins when both have passed.
    if request.finished or request.arrival is None:
        return None
    age = now - request.arrival
    if first_token_s is not None and not request.output and age > first_token_s:
        return "first_token"
    if total_s is not None and age > total_s:
        return "total"
    return None
    # END SOLUTION


def deadline_error(reason: str, limit_s: float) -> APIError:
    """What the client of a request past its deadline is told (504, code "deadline_<reason>")."""
    return APIError(504, f"the request passed its {reason.replace('_', ' ')} deadline of {limit_s:g} s and was "
                         "aborted", type="timeout_error", code=f"deadline_{reason}")
