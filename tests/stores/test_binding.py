"""The PostgreSQL binary cursor: one psycopg cursor kept per connection, through errors and reconnections."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connections, transaction

from django_mailqueue.stores.orm.pg_binding import binary_cursor
from tests.support.databases import DATABASES

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=DATABASES)]


def raw_cursor_of(alias: str) -> object:
    with binary_cursor(connections[alias]) as cursor:
        cursor.execute("SELECT %b::int", [1])
        assert cursor.fetchone() == (1,)
        return cursor.cursor


def test_statements_share_one_psycopg_cursor_which_stays_open(pg_alias: str) -> None:
    first = raw_cursor_of(pg_alias)
    assert raw_cursor_of(pg_alias) is first
    assert not first.closed  # type: ignore[attr-defined]


def test_a_failed_statement_leaves_the_cursor_usable(pg_alias: str) -> None:
    first = raw_cursor_of(pg_alias)
    with pytest.raises(DatabaseError), transaction.atomic(using=pg_alias):
        with binary_cursor(connections[pg_alias]) as cursor:
            cursor.execute("SELECT 1 / %b::int", [0])
    assert raw_cursor_of(pg_alias) is first


def test_a_new_connection_gets_a_new_cursor(pg_alias: str) -> None:
    first = raw_cursor_of(pg_alias)
    connections[pg_alias].close()
    second = raw_cursor_of(pg_alias)
    assert second is not first and not second.closed  # type: ignore[attr-defined]


def test_the_cursor_is_the_connection_threads_own(pg_alias: str) -> None:
    import threading

    mine = raw_cursor_of(pg_alias)
    theirs: list[object] = []

    def other() -> None:
        theirs.append(raw_cursor_of(pg_alias))
        connections[pg_alias].close()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert theirs and theirs[0] is not mine
