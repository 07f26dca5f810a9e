"""What the stores keep for traffic shaping: a destination's suspension, and the rules its records follow."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .items import Reply

#: A suspension record older than this past its `until` is forgotten: its strikes start again at 1. Stores may
#: drop such records (each says where: docs/stores.md, "Shaping"); until they do, they treat them as absent.
FORGET_AFTER = timedelta(days=1)
#: What a bucket's tokens are rounded up by before its whole tokens are counted (see `take_from_bucket`).
TOKEN_SLACK = 1e-9
#: The longest shaping key a store keeps: "relay:" + a host name (253) + ":" + a port, with room to spare.
MAX_KEY = 300
#: The longest holder of a destination's probe (`QueueStore.take_probe`) a store keeps.
MAX_HOLDER = 64


@dataclass(frozen=True, slots=True)
class Suspension:
    """A destination no worker of the store opens a new connection to before `until`."""

    #: a shaping key: a recipient domain, ".mx-suffix", or a relay key such as "relay:host:port"
    destination: str
    #: no new connection to it before this
    until: datetime
    #: the reply that caused it (`code` None for a dead destination)
    reply: Reply
    #: when this run of suspensions began
    since: datetime
    #: suspensions in a row with no success between them (>= 1); the worker doubles on it
    strikes: int

    def as_dict(self) -> dict[str, Any]:
        """As `mailqueue_status --json` prints it."""
        return {
            "destination": self.destination,
            "until": self.until.isoformat(),
            "since": self.since.isoformat(),
            "strikes": self.strikes,
            "reply": {"code": self.reply.code, "status": self.reply.status, "text": self.reply.text},
        }


def key_domain(key: str) -> str | None:
    """The recipient domain a shaping key names; None for a ".mx-suffix" or a relay key ("relay:host:port")."""
    return None if key.startswith(".") or ":" in key else key


def forgotten(until: datetime, now: datetime) -> bool:
    """Whether a record suspended until `until` is past keeping at `now` (see `FORGET_AFTER`)."""
    return until + FORGET_AFTER <= now


def next_suspension(
    recorded: Suspension | None, destination: str, *, until: datetime, reply: Reply, now: datetime
) -> Suspension:
    """The record `suspend` keeps, given the one it holds (None when none): the rule every store follows.

    A suspension recorded while the one held is still in force is the same episode (several workers met the
    same replies at once): one strike, not one a worker. One recorded after it ended is a strike more."""
    if recorded is None or forgotten(recorded.until, now):
        return Suspension(destination, until, reply, since=now, strikes=1)
    strikes = recorded.strikes if recorded.until > now else recorded.strikes + 1
    return Suspension(destination, max(recorded.until, until), reply, since=recorded.since, strikes=strikes)


def refill(left: float, updated: int | None, *, rate: float, burst: int, now: int) -> tuple[float, int]:
    """A bucket's tokens at `now` and its new time, given what its last take left at `updated` (None: a new
    bucket, full). Times are microseconds since the epoch (`clock.to_micros`). A clock behind the bucket's
    (another machine's) refills nothing and keeps the bucket's time.

    The reference rule: the Redis script and the SQL statements compute the same, in the same order of
    floating-point operations.
    """
    if updated is None:
        return float(burst), now
    return min(float(burst), left + (now - updated) * rate / 1e6 if now > updated else left), max(updated, now)


def whole_tokens(tokens: float, want: int) -> int:
    """What a take of `want` gets from `tokens`: the whole tokens, at most `want` (`TOKEN_SLACK`: a token a
    rounding error short of whole counts)."""
    return min(want, math.floor(tokens + TOKEN_SLACK))


def take_from_bucket(
    left: float, updated: int | None, *, rate: float, burst: int, want: int, now: int
) -> tuple[int, float, int]:
    """A take: (taken, tokens left, the bucket's new time); see `refill` and `whole_tokens`."""
    tokens, updated = refill(left, updated, rate=rate, burst=burst, now=now)
    taken = whole_tokens(tokens, want)
    return taken, tokens - taken, updated


@dataclass(frozen=True, slots=True)
class Window:
    """A rate's closed-loop window (`QueueStore.take_tokens`): a grant is allowed only while the tokens in flight,
    the tokens reported done within the last `period` and the grant together stay within `cap`. Counted on the
    store's own clock; times in microseconds (docs/shaping.md, "The window")."""

    #: the most tokens in flight plus done within the last period (a rate's count plus a tenth)
    cap: int
    #: the rate's period
    period: int
    #: a token in flight this long is forgotten (its worker died, or never reports)
    expire: int


#: A window's list: (time in microseconds, tokens), one entry a take or a report (the tokens of one share its time).
Times = list[tuple[int, int]]


def window_take(
    flying: Times, done: Times, *, window: Window, report: int, ended: int, now: int
) -> tuple[int, Times, Times]:
    """The window's room at `now` and its new lists, given the tokens in flight by grant time (oldest first) and
    those reported done by when they ended. Expired entries go; `report` tokens (the oldest in flight) are done,
    dated `ended` microseconds before `now` (the reporter's measure of how long ago the last of them ended, from when
    it sent the report: never earlier than it was; one dated out of the period goes at once); the room is what the
    cap leaves. The reference rule: the Redis script and PostgreSQL's function compute the same; the caller appends
    the tokens granted to `flying` as one entry at `now`."""
    flying = [(t, n) for t, n in flying if t > now - window.expire]
    moved = min(report, sum(n for _, n in flying))
    left, kept = moved, []
    for t, n in flying:
        if left >= n:
            left -= n
        else:
            kept.append((t, n - left))
            left = 0
    added = [(now - ended, moved)] if moved else []
    done = [(t, n) for t, n in done + added if t > now - window.period]
    return max(0, window.cap - sum(n for _, n in kept) - sum(n for _, n in done)), kept, done


def window_times(text: str) -> Times:
    """A window's list as a store keeps it: "time*tokens" entries, comma-separated ("" when empty)."""
    return [(int(t), int(n)) for t, _, n in (part.partition("*") for part in text.split(","))] if text else []


def window_text(times: Times) -> str:
    return ",".join(f"{t}*{n}" for t, n in times)
