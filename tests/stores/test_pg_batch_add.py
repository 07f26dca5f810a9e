"""The batch add on PostgreSQL: one statement whose columns go as arrays packed in binary, and the message
compressed in its row (migration 0021) — the same items and bytes read back."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.db import connections

from django_mailqueue.core.items import NewItem
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.stores.orm.pg_arrays import PackedArray
from django_mailqueue.testing.contract import T0
from tests.support.databases import DATABASES

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=DATABASES)]


def _batch() -> list[NewItem]:
    return [
        NewItem("a@o.test", ("jösé@d.test", "b@D.test", "django"), b"Subject: one\r\n\r\nbody\r\n", subject="one"),
        NewItem("", ("c@e.test",), bytearray(os.urandom(3000)), queue="bulk", message_id="<x@o.test>"),
        NewItem("d@o.test", ("e@f.test",), memoryview(b"\x00\xff" * 10), not_before=T0.replace(year=2031)),
    ]


def test_a_batch_is_one_statement_its_columns_arrays_packed_in_binary(pg_alias: str) -> None:
    store = OrmStore({"database": pg_alias})
    sent: list[tuple[str, Any]] = []

    def capture(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append((sql, params))
        return execute(sql, params, many, context)

    items = _batch()
    with connections[pg_alias].execute_wrapper(capture):
        assert store.put_many(items, now=T0) == 3
    ((sql, params),) = sent
    assert sql.startswith("WITH added AS (")
    assert not any(isinstance(param, list) for param in params)
    assert sum(isinstance(param, PackedArray) for param in params) == 13
    for new in items:
        got = store.get(new.id)
        assert got is not None
        assert [r.address for r in got.recipients] == list(new.recipients)
        assert (got.sender, got.queue, got.size, got.message_id, got.subject) == (
            new.sender,
            new.queue,
            len(bytes(new.message)),
            new.message_id,
            new.subject,
        )
        assert got.next_attempt == (new.not_before or T0)
        assert store.read_message(new.id) == bytes(new.message)


def _lz4(alias: str) -> bool:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
        row = cursor.fetchone()
    return bool(row and row[0])


def test_a_message_over_2_kb_is_compressed_in_its_row_and_read_back_exact(pg_alias: str) -> None:
    if not _lz4(pg_alias):
        pytest.skip("this PostgreSQL has no lz4: migration 0021 leaves the table as 0005 made it")
    store = OrmStore({"database": pg_alias})
    text = b"".join(b"Line %d of a message that repeats itself.\r\n" % n for n in range(200))
    noise = os.urandom(7000)  # lz4 cannot shrink it: kept as it is, in its row
    items = [NewItem("a@o.test", ("b@d.test",), data) for data in (text, noise)]
    store.put_many(items, now=T0)
    with connections[pg_alias].cursor() as cursor:
        cursor.execute(
            "SELECT pg_column_compression(m.data), pg_column_size(m.data), octet_length(m.data)"
            " FROM mailqueue_message m JOIN mailqueue_item i ON i.seq = m.item_id"
            " WHERE i.id = ANY(%s) ORDER BY i.seq",
            [[new.id for new in items]],
        )
        rows = cursor.fetchall()
    assert rows[0][0] == "lz4" and rows[0][1] < len(text) // 4 and rows[0][2] == len(text)
    assert rows[1][0] is None and rows[1][2] == len(noise)
    for new in items:
        assert store.read_message(new.id) == new.message
