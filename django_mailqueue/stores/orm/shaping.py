"""The ORM store's suspensions and a suspended destination's items deferred: through the ORM, on every dialect."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db.models import Exists, F, OuterRef, QuerySet

from ...core.clock import from_micros, to_micros
from ...core.items import RecipientState, Reply
from ...core.shaping import FORGET_AFTER, Suspension, next_suspension
from ...models import QueuedItem, QueuedRecipient
from ...models import Suspension as SuspensionRow

_FORGET_US = FORGET_AFTER // timedelta(microseconds=1)
#: Rounds of make-and-lock before `locked_row` gives up: each lost round is a concurrent delete of the row.
_MAKE_TRIES = 20
#: Items `defer_destination` moves in one statement (under SQLite's bound on parameters).
CHUNK = 500


def suspend(alias: str, destination: str, *, until: datetime, reply: Reply, now: datetime) -> Suspension:
    """Record a suspension, inside the store's transaction: the records forgotten by `now` dropped first (a
    write, so SQLite takes its lock before it reads), the destination's row made if missing, locked, written."""
    rows = SuspensionRow.objects.using(alias)
    now_us = to_micros(now)
    rows.filter(until__lte=now_us - _FORGET_US, probe_until__lte=now_us).delete()
    placeholder = SuspensionRow(destination=destination, until=to_micros(until), since=now_us, strikes=0)
    found = locked_row(rows, placeholder)
    recorded = _suspension(found) if found.strikes else None  # the placeholder is no record
    kept = next_suspension(recorded, destination, until=until, reply=reply, now=now)
    rows.filter(destination=destination).update(
        until=to_micros(kept.until),
        since=to_micros(kept.since),
        strikes=kept.strikes,
        reply_code=reply.code,
        reply_status=reply.status,
        reply_text=reply.text,
        probe_until=0,  # a probe turns into the suspension in this one write
        probe_holder="",
    )
    return kept


def locked_row(rows: QuerySet[SuspensionRow], placeholder: SuspensionRow) -> SuspensionRow:
    """The destination's row, made from `placeholder` if missing (no strike: concurrent writers of a new
    destination then all lock one row), locked. Made again when a concurrent `end_probe` or cleanup deleted the
    row between the insert (which found it) and the lock: at READ COMMITTED the lock then finds nothing."""
    for _ in range(_MAKE_TRIES):
        rows.bulk_create([placeholder], ignore_conflicts=True)
        found = rows.select_for_update().filter(destination=placeholder.destination).first()
        if found is not None:
            return found
    raise RuntimeError(f"the suspension row of {placeholder.destination!r} was deleted {_MAKE_TRIES} times running")


def probe_in_force(alias: str, destination: str, *, now: datetime) -> Suspension | datetime:
    """What kept a `take_probe` from taking it: the suspension in force, else the end of the probe in force
    (`now` when it ended meanwhile: the caller asks again)."""
    now_us = to_micros(now)
    row = SuspensionRow.objects.using(alias).filter(destination=destination).first()
    if row is None:
        return now
    if row.strikes and row.until > now_us:
        return _suspension(row)
    return from_micros(max(now_us, row.probe_until))


def end_probe(alias: str, destination: str, *, holder: str) -> bool:
    """A probe-only row is deleted; a suspension record's probe is cleared."""
    rows = SuspensionRow.objects.using(alias).filter(destination=destination, probe_holder=holder)
    if rows.filter(strikes=0).delete()[0]:
        return True
    return rows.update(probe_until=0, probe_holder="") > 0


def suspensions(alias: str, *, now: datetime, destinations: Sequence[str] | None) -> list[Suspension]:
    rows = SuspensionRow.objects.using(alias).filter(until__gt=to_micros(now))
    if destinations is not None:
        rows = rows.filter(destination__in=list(destinations))
    return [_suspension(row) for row in rows.order_by("destination")]


def clear_suspension(alias: str, destination: str) -> bool:
    return SuspensionRow.objects.using(alias).filter(destination=destination).delete()[0] > 0


def defer_destination(alias: str, domains: Sequence[str], *, until: datetime, now: datetime) -> int:
    """Inside the store's transaction: the items found through the recipients' domain index, then moved by key
    `CHUNK` at a time, those with a pending recipient elsewhere (looked up by item) or a live lease left out.
    Two steps, not one `UPDATE … WHERE seq IN (SELECT …)`: PostgreSQL may plan that as a scan of every item."""
    wanted = sorted({domain.lower() for domain in domains})
    if not wanted:
        return 0
    now_us, until_us = to_micros(now), to_micros(until)
    recipients = QueuedRecipient.objects.using(alias).filter(state=RecipientState.PENDING.value)
    found = list(recipients.filter(domain__in=wanted).order_by().values_list("item_id", flat=True).distinct())
    elsewhere = recipients.filter(item_id=OuterRef("seq")).exclude(domain__in=wanted)
    moved = 0
    for start in range(0, len(found), CHUNK):
        moved += (
            QueuedItem.objects.using(alias)
            .filter(seq__in=found[start : start + CHUNK], next_attempt__lt=until_us)
            .exclude(owner__isnull=False, lease_expires__gt=now_us)
            .exclude(Exists(elsewhere))
            .update(next_attempt=until_us, revision=F("revision") + 1)
        )
    return moved


def _suspension(row: SuspensionRow) -> Suspension:
    return Suspension(
        destination=row.destination,
        until=from_micros(row.until),
        reply=Reply(row.reply_code, row.reply_status, row.reply_text),
        since=from_micros(row.since),
        strikes=row.strikes,
    )
