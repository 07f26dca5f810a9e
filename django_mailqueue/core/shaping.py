"""What the stores keep for traffic shaping: a destination's suspension, and the rules its records follow."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .items import Reply

#: A suspension record older than this past its `until` is forgotten: its strikes start again at 1. Stores may
#: drop such records (each says where: docs/stores.md, "Shaping"); until they do, they treat them as absent.
FORGET_AFTER = timedelta(days=1)
#: The longest shaping key a store keeps: "relay:" + a host name (253) + ":" + a port, with room to spare.
MAX_KEY = 300


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


def forgotten(until: datetime, now: datetime) -> bool:
    """Whether a record suspended until `until` is past keeping at `now` (see `FORGET_AFTER`)."""
    return until + FORGET_AFTER <= now


def next_suspension(
    recorded: Suspension | None, destination: str, *, until: datetime, reply: Reply, now: datetime
) -> Suspension:
    """The record `suspend` keeps, given the one it holds (None when none): the rule every store follows."""
    if recorded is None or forgotten(recorded.until, now):
        return Suspension(destination, until, reply, since=now, strikes=1)
    return Suspension(
        destination, max(recorded.until, until), reply, since=recorded.since, strikes=recorded.strikes + 1
    )


def take_from_bucket(
    tokens: float, updated: datetime | None, *, rate: float, burst: int, want: int, now: datetime
) -> tuple[int, float, datetime]:
    """A token bucket's take: (taken, tokens left, the bucket's new time). `updated` None: a new bucket, full.

    The reference rule; the Redis script and the SQL statements compute the same in their own language.
    A clock behind the bucket's (another machine's) refills nothing and keeps the bucket's time.
    """
    if updated is None:
        tokens, updated = float(burst), now
    elif now > updated:
        tokens = min(float(burst), tokens + (now - updated).total_seconds() * rate)
        updated = now
    taken = min(want, int(tokens))
    return taken, tokens - taken, updated
