"""History.record: every field of every entry lands in its row, on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings

from django_mailqueue.core.items import QueueItem, Recipient, RecipientOutcome, RecipientState, Reply
from django_mailqueue.history import _FIELDS, History, HistoryEntry
from django_mailqueue.models import DeliveryRecord

ALIASES = ["default", pytest.param("pg", marks=pytest.mark.postgres)]


def _entry(n: int, state: RecipientState, reply: Reply, *, possibly: bool = False) -> HistoryEntry:
    item = QueueItem(
        id=uuid.UUID(int=n + 1),
        sender=f"sender{n}@origin.test",
        recipients=(Recipient(f"r{n}@x.test"),),
        size=10,
        created=datetime(2026, 1, 1, tzinfo=UTC),
        next_attempt=datetime(2026, 1, 1, tzinfo=UTC),
        queue="bulk" if n % 2 else "default",
        message_id=f"<{n}@origin.test>",
        subject="s",
    )
    outcome = RecipientOutcome(f"R{n}@B\u00fccher.Test", state, reply, remote_mta=f"mx{n}.x.test")
    recorded = datetime(2026, 1, 2, 3, 4, 5, n, tzinfo=UTC)
    return HistoryEntry(item=item, outcome=outcome, attempt=n + 1, recorded=recorded, possibly_delivered=possibly)


@pytest.mark.django_db(transaction=True, databases=["default", "pg"] if "pg" in settings.DATABASES else ["default"])
@pytest.mark.parametrize("alias", ALIASES)
def test_every_field_of_every_entry_is_recorded(alias: str, request: pytest.FixtureRequest) -> None:
    if alias == "pg":
        request.getfixturevalue("pg_alias")
    entries = [
        _entry(0, RecipientState.DELIVERED, Reply(250, "2.0.0", "ok \u2603")),
        _entry(1, RecipientState.PENDING, Reply(None, "4.4.1", "no answer"), possibly=True),
        _entry(2, RecipientState.FAILED, Reply(550, "5.1.1", "x" * 5000)),
    ] + [_entry(n, RecipientState.PENDING, Reply(None, "4.4.1", "late")) for n in range(3, 40)]

    History(alias).record(entries)
    History(alias).record([_entry(40, RecipientState.PENDING, Reply(None, "4.4.2", "all codes empty"))])

    rows = list(
        DeliveryRecord.objects.using(alias)
        .order_by("attempt")
        .values_list(
            "item_id",
            "message_id",
            "sender",
            "recipient",
            "domain",
            "queue",
            "state",
            "reply_code",
            "reply_status",
            "reply_text",
            "remote_mta",
            "attempt",
            "possibly_delivered",
            "recorded",
        )
    )
    assert len(rows) == 41
    for row, entry in zip(
        rows, [*entries, _entry(40, RecipientState.PENDING, Reply(None, "4.4.2", "all codes empty"))], strict=True
    ):
        n = entry.attempt - 1
        assert row == (
            uuid.UUID(int=n + 1),
            f"<{n}@origin.test>",
            f"sender{n}@origin.test",
            f"R{n}@B\u00fccher.Test",
            "b\u00fccher.test",
            "bulk" if n % 2 else "default",
            {
                RecipientState.DELIVERED: "delivered",
                RecipientState.PENDING: "deferred",
                RecipientState.FAILED: "failed",
            }[entry.outcome.state],
            entry.outcome.reply.code,
            entry.outcome.reply.status,
            entry.outcome.reply.text,
            f"mx{n}.x.test",
            n + 1,
            n == 1,
            datetime(2026, 1, 2, 3, 4, 5, n, tzinfo=UTC),
        )


@pytest.mark.django_db(transaction=True)
def test_sqlite_takes_the_insert_as_written_through_execute_wrappers() -> None:
    """On SQLite the insert reaches `sqlite3`'s own cursor with `?` (no `%s` rewrite of its hundreds of
    parameters); a site's `execute_wrapper` still sees it, and the rows are Django's."""
    from django.db import connection

    seen: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    entries = [_entry(n, RecipientState.DELIVERED, Reply(250, "2.0.0", "ok")) for n in range(80)]
    # Django 4.2 and 5.2 take at most 999 parameters a statement on SQLite (two INSERTs here), Django 6 its
    # library's real limit (one)
    per_statement = connection.ops.bulk_batch_size(_FIELDS, entries)
    with connection.execute_wrapper(wrapper):
        History("default").record(entries)
    inserts = [sql for sql in seen if sql.startswith("INSERT INTO")]
    assert len(inserts) == -(-len(entries) // per_statement)
    assert inserts and all("?" in sql and "%s" not in sql for sql in inserts)
    assert (
        DeliveryRecord.objects.filter(item_id=uuid.UUID(int=1)).get().recorded
        == _entry(0, RecipientState.DELIVERED, Reply(250, "", "")).recorded
    )
