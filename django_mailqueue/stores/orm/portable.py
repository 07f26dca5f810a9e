"""The portable dialect: every statement made by Django's ORM, for any database Django supports
(MySQL, MariaDB, Oracle, …); the SQLite and PostgreSQL dialects take from it what they do not write by hand."""

from __future__ import annotations

import builtins
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Q

from ...core.clock import to_micros
from ...core.items import NewItem, QueueItem, address_domain, as_added
from ...core.shaping import Window, refill, whole_tokens, window_take, window_text, window_times
from ...models import QueuedItem, QueuedMessage, QueuedRecipient, RateBucket
from ...models import Suspension as SuspensionRow
from .base import Dialect
from .rows import (
    ITEM_FIELDS,
    ITEM_WRITTEN,
    RECIPIENT_FIELDS,
    RECIPIENT_WRITTEN,
    TEXT_LIMITS,
    ItemRow,
    RecipientRow,
)
from .shaping import locked_row


def due(alias: str, lane: str | None, now_us: int) -> models.QuerySet[QueuedItem]:
    """Items due at `now_us` and not leased (their lease expired, or none), of `lane` when given."""
    items = (
        QueuedItem.objects.using(alias)
        .filter(next_attempt__lte=now_us)
        .filter(Q(lease_expires__isnull=True) | Q(lease_expires__lte=now_us))
    )
    return items.filter(queue=lane) if lane is not None else items


def orm_recipients(alias: str, seqs: Sequence[int]) -> dict[int, list[RecipientRow]]:
    """The recipients' rows of the items by `seq`, in order, through the ORM."""
    found: dict[int, list[RecipientRow]] = {seq: [] for seq in seqs}
    if seqs:
        rows = (
            QueuedRecipient.objects.using(alias)
            .filter(item_id__in=list(seqs))
            .order_by("item_id", "position")
            .values_list(*RECIPIENT_FIELDS)
        )
        for row in rows:
            found[row[0]].append(row)
    return found


class PortableDialect(Dialect):
    """The statements through the ORM. The claim takes rows with `select_for_update(skip_locked=True)`
    where the database has it, so concurrent claimers need row locks (SQLite's one writer lacks them)."""

    name = "portable"

    def add_rows(
        self, conn: BaseDatabaseWrapper, items: Sequence[NewItem], now: datetime, now_us: int, *, returning: bool = True
    ) -> builtins.list[QueueItem]:
        added = [as_added(new, now, now_us, text_limits=TEXT_LIMITS) for new in items]
        rows = [
            QueuedItem(
                id=item.id,
                sender=item.sender,
                size=item.size,
                created=now_us,
                next_attempt=to_micros(item.next_attempt),
                queue=item.queue,
                message_id=item.message_id,
                subject=item.subject,
            )
            for item in added
        ]
        created = QueuedItem.objects.using(self.alias).bulk_create(rows)
        if any(row.seq is None for row in created):  # a database that cannot return the keys of an insert
            by_id = dict(
                QueuedItem.objects.using(self.alias).filter(id__in=[r.id for r in rows]).values_list("id", "seq")
            )
            for row in created:
                row.seq = by_id[row.id]
        QueuedRecipient.objects.using(self.alias).bulk_create(
            [
                QueuedRecipient(item_id=row.seq, position=i, address=address, domain=address_domain(address))
                for row, new in zip(created, items, strict=True)
                for i, address in enumerate(new.recipients)
            ]
        )
        QueuedMessage.objects.using(self.alias).bulk_create(
            [QueuedMessage(item_id=row.seq, data=bytes(new.message)) for row, new in zip(created, items, strict=True)]
        )
        return added

    def claim(self, lane: str | None, owner: str, now_us: int, expires_us: int, limit: int) -> list[ItemRow]:
        items = QueuedItem.objects.using(self.alias)
        taken = list(
            due(self.alias, lane, now_us)
            .order_by("next_attempt", "seq")
            .select_for_update(skip_locked=True)
            .values_list("seq", flat=True)[:limit]
        )
        if not taken:
            return []
        # reclaims first: MySQL and MariaDB assign left to right, each expression seeing the columns set before it.
        items.filter(seq__in=taken).update(
            reclaims=models.Case(models.When(owner__isnull=False, then=F("reclaims") + 1), default=F("reclaims")),
            revision=F("revision") + 1,
            owner=owner,
            lease_expires=expires_us,
        )
        return list(items.filter(seq__in=taken).values_list(*ITEM_FIELDS))

    def queue_names(self, limit: int) -> list[str]:
        items = QueuedItem.objects.using(self.alias).order_by("queue")
        return list(items.values_list("queue", flat=True).distinct()[:limit])

    def read(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        return list(self._items(item_ids).values_list(*ITEM_FIELDS))

    def lock(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        return list(self._items(item_ids).select_for_update().values_list(*ITEM_FIELDS))

    def _items(self, item_ids: Sequence[uuid.UUID]) -> models.QuerySet[QueuedItem]:
        return QueuedItem.objects.using(self.alias).filter(id__in=list(item_ids)).order_by("seq")

    def recipients(self, seqs: Sequence[int]) -> dict[int, list[RecipientRow]]:
        return orm_recipients(self.alias, seqs)

    def write_back(self, items: Sequence[tuple[Any, ...]], recipients: Sequence[tuple[Any, ...]]) -> None:
        if recipients:
            QueuedRecipient.objects.using(self.alias).bulk_update(
                [QueuedRecipient(id=r[-1], **dict(zip(RECIPIENT_WRITTEN, r, strict=False))) for r in recipients],
                list(RECIPIENT_WRITTEN),
            )
        if items:
            QueuedItem.objects.using(self.alias).bulk_update(
                [
                    QueuedItem(
                        seq=i[-1],
                        owner=None,
                        lease_expires=None,
                        reclaims=0,
                        **dict(zip(ITEM_WRITTEN, i, strict=False)),
                    )
                    for i in items
                ],
                [*ITEM_WRITTEN, "owner", "lease_expires", "reclaims"],
            )

    def drop(self, seqs: Sequence[int]) -> None:
        """Three `DELETE … WHERE … IN` statements, as many values each as the database takes.
        Not `QuerySet.delete()`: for an item (whose rows cascade) it first reads every row into a model
        instance — twice the time of the drop."""
        conn = self.connection
        bounds = [n for n in (conn.ops.max_in_list_size(), conn.features.max_query_params) if n]
        step = max(1, min(bounds, default=len(seqs)))
        with conn.cursor() as cursor:
            for start in range(0, len(seqs), step):
                chunk = list(seqs[start : start + step])
                for model, column in ((QueuedMessage, "item_id"), (QueuedRecipient, "item_id"), (QueuedItem, "seq")):
                    table, marks = conn.ops.quote_name(model._meta.db_table), ", ".join(["%s"] * len(chunk))
                    cursor.execute(f"DELETE FROM {table} WHERE {conn.ops.quote_name(column)} IN ({marks})", chunk)  # noqa: S608

    def take_tokens(self, name: str, rate: float, burst: int, want: int, now_us: int) -> int:
        """A transaction: the bucket's row made if missing (a full bucket), locked, read, and written back."""
        buckets = RateBucket.objects.using(self.alias)
        with transaction.atomic(using=self.alias):
            found = buckets.select_for_update().filter(name=name).values_list("tokens", "wanted", "updated").first()
            if found is None:
                full = RateBucket(name=name, rate=rate, burst=burst, tokens=float(burst), wanted=0, updated=now_us)
                buckets.bulk_create([full], ignore_conflicts=True)  # or another taker made it first: take from theirs
                found = buckets.select_for_update().filter(name=name).values_list("tokens", "wanted", "updated").get()
            held, wanted, updated = found
            tokens, updated = refill(held - whole_tokens(held, wanted), updated, rate=rate, burst=burst, now=now_us)
            wanted = min(want, burst)
            buckets.filter(name=name).update(rate=rate, burst=burst, tokens=tokens, wanted=wanted, updated=updated)
        return whole_tokens(tokens, wanted)

    def take_window(
        self, name: str, rate: float, burst: int, want: int, now_us: int, window: Window, done: int, ended: int
    ) -> int:
        """`take_tokens`'s transaction with the window, on this machine's clock read once the row is locked (SQLite's
        writers are one machine's processes; another database's takers share its clock only if their machines do)."""
        buckets = RateBucket.objects.using(self.alias)
        columns = ("tokens", "wanted", "updated", "flying", "done")
        with transaction.atomic(using=self.alias):
            found = buckets.select_for_update().filter(name=name).values_list(*columns).first()
            if found is None:
                full = RateBucket(name=name, rate=rate, burst=burst, tokens=float(burst), wanted=0, updated=now_us)
                buckets.bulk_create([full], ignore_conflicts=True)
                found = buckets.select_for_update().filter(name=name).values_list(*columns).get()
            held, wanted, updated, flying, finished = found
            clock = round(time.time() * 1e6)
            room, kept, dated = window_take(
                window_times(flying), window_times(finished), window=window, report=done, ended=ended, now=clock
            )
            tokens, updated = refill(held - whole_tokens(held, wanted), updated, rate=rate, burst=burst, now=now_us)
            wanted = min(want, burst, room)
            taken = whole_tokens(tokens, wanted)
            buckets.filter(name=name).update(
                rate=rate,
                burst=burst,
                tokens=tokens,
                wanted=wanted,
                updated=updated,
                flying=window_text(kept + [(clock, taken)] if taken else kept),
                done=window_text(dated),
            )
        return taken

    def take_probe(self, destination: str, holder: str, until_us: int, now_us: int) -> bool:
        """A transaction: the row made if missing (a probe only, no strike), locked, tested, written."""
        rows = SuspensionRow.objects.using(self.alias)
        with transaction.atomic(using=self.alias):
            found = locked_row(rows, SuspensionRow(destination=destination, until=0, since=now_us, strikes=0))
            if found.until > now_us or (found.probe_until > now_us and found.probe_holder != holder):
                return False
            rows.filter(destination=destination).update(probe_until=until_us, probe_holder=holder)
        return True

    def read_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        rows = (
            QueuedMessage.objects.using(self.alias).filter(item__id__in=list(item_ids)).values_list("item__id", "data")
        )
        return {item_id: bytes(data) for item_id, data in rows}
