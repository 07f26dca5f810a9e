"""The ORM store's suppression list: its statements through the ORM, the same in every dialect."""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import connections, models

from ...core.clock import from_micros, to_micros
from ...core.items import Reply, Suppression
from ...models import SuppressedAddress

_FIELDS = ("address", "reply_code", "reply_status", "reply_text", "since", "item_id")
_UPDATED = ["reply_code", "reply_status", "reply_text", "since", "item_id"]


def _table(alias: str) -> models.QuerySet[SuppressedAddress]:
    return SuppressedAddress.objects.using(alias)


def _chunks(alias: str, values: Sequence[str], *, also: int = 0) -> Iterator[builtins.list[str]]:
    """`values` in as few pieces as the database takes in one statement's `IN` list (with `also`
    parameters more): one piece on PostgreSQL, 998 on SQLite, 1,000 on Oracle."""
    conn = connections[alias]
    bounds = [n for n in (conn.ops.max_in_list_size(), conn.features.max_query_params) if n]
    step = max(1, min(bounds) - also) if bounds else max(1, len(values))
    for start in range(0, len(values), step):
        yield builtins.list(values[start : start + step])


def _entry(row: tuple[Any, ...]) -> Suppression:
    address, code, status, text, since, item_id = row
    return Suppression(address, Reply(code, status, text), from_micros(since), item_id)


def look_up(alias: str, addresses: Sequence[str], since: int) -> dict[str, Suppression]:
    """The entries of `addresses` since `since` (µs): one SELECT for a worker's batch."""
    found: dict[str, Suppression] = {}
    for chunk in _chunks(alias, builtins.list(dict.fromkeys(addresses)), also=1):
        rows = _table(alias).filter(address__in=chunk, since__gte=since).values_list(*_FIELDS)
        found.update((str(row[0]), _entry(row)) for row in rows)
    return found


def write(alias: str, entries: Sequence[Suppression]) -> None:
    """Insert the entries, replacing an address listed already: an upsert where the database has one
    (PostgreSQL, SQLite, MySQL, MariaDB), which concurrent writers never trip over."""
    latest = {entry.address: entry for entry in entries}  # one row per address: the last entry wins
    if not latest:
        return
    rows = [
        SuppressedAddress(
            address=e.address,
            reply_code=e.reply.code,
            reply_status=e.reply.status,
            reply_text=e.reply.text,
            since=to_micros(e.since),
            item_id=e.item_id,
        )
        for e in sorted(latest.values(), key=lambda e: e.address)  # concurrent upserts lock rows in one order
    ]
    features = connections[alias].features
    if features.supports_update_conflicts_with_target:
        _table(alias).bulk_create(rows, update_conflicts=True, unique_fields=["address"], update_fields=_UPDATED)
    elif features.supports_update_conflicts:
        _table(alias).bulk_create(rows, update_conflicts=True, update_fields=_UPDATED)
    else:  # Oracle: in the store's transaction, the old rows out, the new in
        remove(alias, builtins.list(latest))
        _table(alias).bulk_create(rows)


def remove(alias: str, addresses: Sequence[str]) -> int:
    removed = 0
    for chunk in _chunks(alias, builtins.list(dict.fromkeys(addresses))):
        removed += _table(alias).filter(address__in=chunk).delete()[0]  # nothing refers to the rows: one DELETE
    return removed


def _listed(alias: str, since: int, search: str | None) -> models.QuerySet[SuppressedAddress]:
    rows = _table(alias).filter(since__gte=since)
    return rows.filter(address__icontains=search) if search else rows


def page(alias: str, since: int, search: str | None, offset: int, limit: int) -> builtins.list[Suppression]:
    offset, limit = max(offset, 0), max(limit, 0)
    rows = _listed(alias, since, search).order_by("-since", "address").values_list(*_FIELDS)
    return [_entry(row) for row in rows[offset : offset + limit]] if limit else []


def count(alias: str, since: int, search: str | None) -> int:
    return _listed(alias, since, search).count()


def prune(alias: str, before: int) -> int:
    return _table(alias).filter(since__lt=before).delete()[0]
