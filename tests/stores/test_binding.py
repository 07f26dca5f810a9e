"""The PostgreSQL binary cursor: one psycopg cursor kept per connection, through errors and reconnections."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connections, transaction

from django_mailqueue.stores.orm import pg_binding
from django_mailqueue.stores.orm.pg_binding import binary_cursor, execute_autocommit
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


def run_add_one(alias: str, value: int) -> None:
    execute_autocommit(connections[alias], "SELECT %b::int + 0 * length(%b::text)", [value, "add"])


def prepared_here(alias: str) -> list[str]:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_in_autocommit_a_statement_is_prepared_from_its_second_run(pg_alias: str) -> None:
    if "prepare_threshold" in connections[pg_alias].settings_dict.get("OPTIONS", {}):
        pytest.skip("the site chose prepare_threshold itself")
    run_add_one(pg_alias, 1)
    assert not any("length" in s for s in prepared_here(pg_alias))  # one run: a connection per request pays nothing
    run_add_one(pg_alias, 2)
    run_add_one(pg_alias, 3)
    assert len([s for s in prepared_here(pg_alias) if "length" in s]) == 1
    assert connections[pg_alias].connection.prepare_threshold is None  # Django's statements: never prepared


def test_in_a_transaction_nothing_is_prepared(pg_alias: str) -> None:
    with transaction.atomic(using=pg_alias):
        for value in range(3):
            run_add_one(pg_alias, value)
        assert not any("length" in s for s in prepared_here(pg_alias))


def test_the_sites_own_choice_holds(pg_alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = connections[pg_alias]
    monkeypatch.setitem(
        conn.settings_dict, "OPTIONS", {**conn.settings_dict.get("OPTIONS", {}), "prepare_threshold": None}
    )
    conn.close()
    for value in range(3):
        run_add_one(pg_alias, value)
    assert not any("length" in s for s in prepared_here(pg_alias))


def test_a_statement_the_server_lost_runs_again_unprepared_and_is_not_prepared_again(
    pg_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "prepare_threshold" in connections[pg_alias].settings_dict.get("OPTIONS", {}):
        pytest.skip("the site chose prepare_threshold itself")
    monkeypatch.setattr(pg_binding, "_UNPREPARED", set())
    for value in range(3):
        run_add_one(pg_alias, value)
    with connections[pg_alias].cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # as a pooler's reset of the server connection does
    with binary_cursor(connections[pg_alias]) as cursor:
        run_add_one(pg_alias, 7)
        cursor.execute("SELECT %b::int", [8])
        assert cursor.fetchone() == (8,)
    assert pg_alias in pg_binding._UNPREPARED
    run_add_one(pg_alias, 9)
    assert not any("length" in s for s in prepared_here(pg_alias))
