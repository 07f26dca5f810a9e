"""The suppression list's rules: its setting, an address's key, which failures list an address, and what a
listed recipient comes to — all without I/O (docs/deliverability.md, "The suppression list")."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .core.clock import EPOCH
from .core.items import QueueItem, RecipientOutcome, RecipientState, Reply, Suppression
from .validation import InvalidValueError

DEFAULT_STATUSES = ("5.1.1", "5.1.2", "5.1.10", "5.2.1")
DEFAULT_DAYS = 365
#: the status of an address an operator lists, unless they name another
BY_HAND_STATUS = "5.1.1"
#: a permanent enhanced status code (RFC 3463): 5.subject.detail
_PERMANENT_STATUS = re.compile(r"5\.\d{1,3}\.\d{1,3}")


@dataclass(frozen=True)
class SuppressionSettings:
    """`MAILQUEUE["SUPPRESSION"]`: the statuses that list an address, and for how many days."""

    statuses: frozenset[str] = frozenset(DEFAULT_STATUSES)
    days: int = DEFAULT_DAYS

    def cut_off(self, now: datetime) -> datetime:
        """The oldest `since` of an entry that still applies at `now`."""
        return now - timedelta(days=self.days)


def parse_suppression(value: Any) -> SuppressionSettings | None:
    """The setting: None (off), or a dict of `STATUSES` and `DAYS`, either left to its default."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidValueError(f"must be None or a dict with STATUSES and DAYS, not {type(value).__name__}")
    unknown = sorted(str(k) for k in set(value) - {"STATUSES", "DAYS"})
    if unknown:
        raise InvalidValueError(f"has unknown keys {unknown}; it takes STATUSES and DAYS")
    statuses = value.get("STATUSES", DEFAULT_STATUSES)
    if isinstance(statuses, str) or not isinstance(statuses, list | tuple | set | frozenset):
        raise InvalidValueError('["STATUSES"] must be a list of enhanced status codes such as "5.1.1"')
    wrong = [s for s in statuses if not isinstance(s, str) or not _PERMANENT_STATUS.fullmatch(s)]
    if wrong:
        raise InvalidValueError(
            f'["STATUSES"] holds {wrong[0]!r}: each must be a permanent enhanced status code (RFC 3463), '
            'such as "5.1.1"'
        )
    days = value.get("DAYS", DEFAULT_DAYS)
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 36500:
        raise InvalidValueError(f'["DAYS"] must be a whole number of days from 1 to 36500, not {days!r}')
    return SuppressionSettings(frozenset(statuses), days)


def suppression_key(address: str) -> str:
    """An address as the list keys it: the local part as given (RFC 5321 §2.4: only the receiving host may
    read it without regard to case), the domain lowercase A-label, as DNS reads it."""
    from .delivery.addresses import domain_to_ascii  # not at the top: delivery imports conf, which imports this

    local, at, domain = address.rpartition("@")
    if not at:
        return address
    return f"{local}@{domain_to_ascii(domain) or domain.lower()}"


def entries_for(
    item: QueueItem,
    outcomes: Iterable[RecipientOutcome],
    rule: SuppressionSettings | None,
    *,
    now: datetime,
    listed: frozenset[str] = frozenset(),
) -> tuple[Suppression, ...]:
    """The entries `outcomes` put on the list: each recipient failed with a status of `rule`, but those
    failed by the list itself (`listed`)."""
    if rule is None:
        return ()
    found: dict[str, Suppression] = {}
    for o in outcomes:
        if o.state is RecipientState.FAILED and o.reply.status in rule.statuses and o.address not in listed:
            key = suppression_key(o.address)
            found[key] = Suppression(key, o.reply, now, item.id)
    return tuple(found.values())


def listed_outcome(address: str, entry: Suppression) -> RecipientOutcome:
    """A listed recipient fails at once, with no SMTP attempt: the original status, and a reply that says
    it was suppressed and since when (code None: no server answered this time)."""
    since = entry.since.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    was = str(entry.reply) if entry.reply.code is not None else entry.reply.text
    text = f"suppressed since {since}: the address is on the suppression list after {was}"
    return RecipientOutcome(address, RecipientState.FAILED, Reply(None, entry.reply.status, text))


def shown_since(rule: SuppressionSettings | None, now: datetime) -> datetime:
    """The oldest entry the admin and `mailqueue_suppress list` show: those that apply, or, with no list
    (`SUPPRESSION = None`), every entry kept."""
    return rule.cut_off(now) if rule is not None else EPOCH


def by_hand(address: str, *, status: str = BY_HAND_STATUS, reason: str = "", now: datetime) -> Suppression:
    """The entry of an address an operator lists (admin, `mailqueue_suppress add`): checked as SMTP would
    carry it, keyed as the worker looks it up. ValueError says what is wrong."""
    from .delivery.addresses import parse_address

    address = address.strip()
    if parse_address(address) is None:
        raise ValueError(f"{address!r} is not an address SMTP can carry (local@domain)")
    if not _PERMANENT_STATUS.fullmatch(status):
        raise ValueError(f"{status!r} is not a permanent enhanced status code such as 5.1.1")
    reason = " ".join(reason.split())[:500] or "added by hand"
    return Suppression(suppression_key(address), Reply(None, status, reason), now)
