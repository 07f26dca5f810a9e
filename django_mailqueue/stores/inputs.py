"""What every store refuses in its input (`INVALID`): the store contract's rules on text, addresses, owners,
times and keys, checked before anything is written."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from ..core.errors import Code, QueueError
from ..core.items import Completion, ItemOrder, NewItem, RecipientOutcome, Reply, Suppression
from ..core.shaping import MAX_HOLDER, MAX_KEY, Window
from ..core.text import refuse_controls, refuse_line_breaks, refuse_unkeepable

if TYPE_CHECKING:
    from .base import QueueStore


#: What an envelope address may not hold besides what no text may: a space, angle brackets, a tab.
_NOT_IN_ENVELOPE = re.compile("[ <>\t]")


def _plain(value: object) -> bool:
    """Printable ASCII: no NUL, lone surrogate or line break to look for (two flag reads and one scan)."""
    return isinstance(value, str) and value.isascii() and value.isprintable()


def check_new_item(item: NewItem) -> None:
    """Refuse an item no store may keep (`INVALID`): see the contract's text rules."""
    if not isinstance(item.message, bytes | bytearray | memoryview):
        raise QueueError(Code.INVALID, "the message must be bytes")
    if not item.recipients:
        raise QueueError(Code.INVALID, "an item needs at least one recipient")
    check_address(item.sender, "the sender", allow_empty=True)
    seen = set()
    for address in item.recipients:
        check_address(address, "a recipient")
        if address in seen:
            raise QueueError(Code.INVALID, f"recipient {address!r} is given twice")
        seen.add(address)
    for value, what in (
        (item.queue, "the queue name"),
        (item.message_id, "the Message-ID"),
        (item.subject, "the subject"),
    ):
        if not _plain(value):
            refuse_unkeepable(value, what)
            refuse_line_breaks(value, what)
    if not item.queue or len(item.queue) > 100:
        raise QueueError(Code.INVALID, "the queue name must be 1 to 100 characters")
    if item.not_before is not None and item.not_before.tzinfo is None:
        raise QueueError(Code.INVALID, "not_before must be an aware datetime")


def check_address(address: str, what: str, *, allow_empty: bool = False) -> None:
    if not isinstance(address, str):
        raise QueueError(Code.INVALID, f"{what} must be a string")
    if not _plain(address):
        refuse_unkeepable(address, what)
        refuse_line_breaks(address, what)
    if not address:
        if allow_empty:
            return
        raise QueueError(Code.INVALID, f"{what} is empty")
    # No "@" is a bare local part ("webmaster"), which only a relay route delivers (docs/guide.md).
    if len(address) > 320 or _NOT_IN_ENVELOPE.search(address):
        raise QueueError(Code.INVALID, f"{what} {address!r} is not an envelope address")


def check_completion(completion: Completion) -> None:
    """Refuse outcomes holding text no store may keep (`INVALID`)."""
    for outcome in completion.outcomes:
        check_outcome(outcome)
    if completion.next_attempt.tzinfo is None:
        raise QueueError(Code.INVALID, "next_attempt must be an aware datetime")
    if completion.dsns:
        if completion.now is None or completion.now.tzinfo is None:
            raise QueueError(Code.INVALID, "a completion with DSNs needs `now`, an aware datetime")
        for dsn in completion.dsns:
            check_new_item(dsn)
        if len({dsn.id for dsn in completion.dsns}) != len(completion.dsns):
            raise QueueError(Code.INVALID, "a DSN id is given twice in the completion")
    check_suppressions(completion.suppress)
    if completion.keep_failed and (completion.now is None or completion.now.tzinfo is None):
        raise QueueError(Code.INVALID, "a completion that keeps failed items needs `now`, an aware datetime")


def check_suppressions(entries: Sequence[Suppression]) -> None:
    """Refuse suppression entries no store may keep (`INVALID`); an address given twice is one too many."""
    seen = set()
    for entry in entries:
        check_address(entry.address, "a suppressed address")
        if entry.address in seen:
            raise QueueError(Code.INVALID, f"the suppressed address {entry.address!r} is given twice")
        seen.add(entry.address)
        refuse_unkeepable(entry.reply.text, "a reply's text")
        refuse_unkeepable(entry.reply.status, "a reply's status")
        if len(entry.reply.status) > 16:
            raise QueueError(Code.INVALID, "a reply's status must be at most 16 characters")
        if entry.since.tzinfo is None:
            raise QueueError(Code.INVALID, "a suppression's `since` must be an aware datetime")


def check_outcome(outcome: RecipientOutcome) -> None:
    refuse_unkeepable(outcome.reply.text, "a reply's text")
    refuse_unkeepable(outcome.reply.status, "a reply's status")
    refuse_unkeepable(outcome.remote_mta, "a reply's remote MTA")


def check_order(store: QueueStore, order: ItemOrder) -> None:
    """Refuse an order the store does not give (`INVALID`)."""
    if order not in store.orders:
        raise QueueError(Code.INVALID, f"{type(store).__name__} does not list items in {order.value!r} order")


def check_owner(owner: str) -> None:
    if not isinstance(owner, str) or not owner:
        raise QueueError(Code.INVALID, "owner must be a non-empty string")
    refuse_unkeepable(owner, "the owner")
    if len(owner) > 200:
        raise QueueError(Code.INVALID, "owner must be at most 200 characters")


def check_take(
    key: str,
    rate: float,
    burst: int,
    want: int,
    now: datetime,
    window: Window | None = None,
    done: int = 0,
    ended: float = 0.0,
) -> None:
    """Refuse a `take_tokens` call no store can answer (`INVALID`)."""
    check_key(key, "a bucket's key")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < float("inf"):
        raise QueueError(Code.INVALID, "a bucket's rate must be a positive number of tokens a second")
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
        raise QueueError(Code.INVALID, "a bucket's burst must be a whole number of at least 1")
    if isinstance(want, bool) or not isinstance(want, int) or want < 0:
        raise QueueError(Code.INVALID, "the tokens wanted must be a whole number of at least 0")
    check_aware(now, "now")
    if window is not None:
        figures = (window.cap, window.period, window.expire)
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in figures):
            raise QueueError(Code.INVALID, "a window's cap, period and expiry must be whole numbers of at least 1")
    if isinstance(done, bool) or not isinstance(done, int) or done < 0:
        raise QueueError(Code.INVALID, "the tokens reported done must be a whole number of at least 0")
    if isinstance(ended, bool) or not isinstance(ended, int | float) or not 0 <= ended < float("inf"):
        raise QueueError(Code.INVALID, "when the tokens reported done ended must be a number of seconds, at least 0")


def check_suspend(destination: str, until: datetime, reply: Reply, now: datetime) -> None:
    """Refuse a `suspend` call holding what no store may keep (`INVALID`)."""
    check_key(destination, "a destination")
    refuse_unkeepable(reply.text, "a reply's text")
    refuse_unkeepable(reply.status, "a reply's status")
    check_aware(until, "until")
    check_aware(now, "now")


def check_probe(destination: str, holder: str, until: datetime, now: datetime) -> None:
    """Refuse a `take_probe` call no store can answer (`INVALID`)."""
    check_key(destination, "a destination")
    check_key(holder, "a probe's holder")
    if len(holder) > MAX_HOLDER:
        raise QueueError(Code.INVALID, f"a probe's holder must be at most {MAX_HOLDER} characters")
    check_aware(until, "until")
    check_aware(now, "now")


def check_defer(domains: Sequence[str], until: datetime, now: datetime) -> None:
    """Refuse a `defer_destination` call no store can answer (`INVALID`)."""
    if isinstance(domains, str):
        raise QueueError(Code.INVALID, "domains must be a sequence of domains, not one string")
    for domain in domains:
        check_key(domain, "a domain")
    check_aware(until, "until")
    check_aware(now, "now")


def check_key(key: str, what: str) -> None:
    """Refuse a destination or bucket key no store keeps (`INVALID`): empty, too long, a control character."""
    if not isinstance(key, str) or not key:
        raise QueueError(Code.INVALID, f"{what} must be a non-empty string")
    if len(key) > MAX_KEY:
        raise QueueError(Code.INVALID, f"{what} must be at most {MAX_KEY} characters")
    refuse_unkeepable(key, what)
    refuse_controls(key, what)


def check_aware(when: datetime, what: str) -> None:
    if not isinstance(when, datetime) or when.tzinfo is None:
        raise QueueError(Code.INVALID, f"{what} must be an aware datetime")
