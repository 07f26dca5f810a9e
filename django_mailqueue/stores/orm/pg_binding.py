"""PostgreSQL cursors that send the parameters apart from the statement, in binary (psycopg 3)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from . import pg_arrays

#: The attribute of a Django connection that keeps its psycopg cursor: (the psycopg connection, the cursor).
_KEPT = "_mailqueue_binary_cursor"


@contextmanager
def binary_cursor(conn: BaseDatabaseWrapper) -> Iterator[CursorWrapper]:
    """A cursor, inside Django's wrapper, for statements that write `%b` for every parameter.

    The psycopg cursor under it is kept with the connection and reused: fetch a statement's rows
    before the next `binary_cursor` statement on the same connection, and read large results
    elsewhere. Why: docs/performance.md, "PostgreSQL: parameters in binary".
    """
    kept = _kept_cursor(conn)
    conn.validate_thread_sharing()
    # Wrapped as Django wraps its own cursors: with the query log when it is on (DEBUG, a test's capture).
    yield conn.make_debug_cursor(kept) if conn.queries_logged else conn.make_cursor(kept)


def _kept_cursor(conn: BaseDatabaseWrapper) -> Any:
    import psycopg

    conn.ensure_connection()
    raw = conn.connection
    kept = getattr(conn, _KEPT, None)
    if kept is not None and kept[0] is raw and not kept[1].closed:
        return kept[1]
    with conn.wrap_database_errors:
        cursor = psycopg.Cursor(raw)
    pg_arrays.register(cursor)
    setattr(conn, _KEPT, (raw, cursor))
    return cursor


#: Aliases on which a statement prepared by `execute_autocommit` went missing on the server (a pooler that
#: does not keep prepared statements): never prepared there again in this process.
_UNPREPARED: set[str] = set()
#: SQLSTATE invalid_sql_statement_name: "prepared statement … does not exist".
_LOST_STATEMENT = "26000"


def execute_autocommit(conn: BaseDatabaseWrapper, sql: str, params: list[Any]) -> None:
    """Run one `binary_cursor` statement whose result is not read; outside a transaction, prepared on the server
    from its second run on a connection (parsed and planned once), unless the site chose for itself.

    The site chooses when `OPTIONS` names `prepare_threshold` (`None`: never prepare; a number: psycopg
    prepares every statement on that run). In autocommit the statement is its own transaction, so when the
    server has lost it (a pooler in transaction mode that does not keep prepared statements) it runs again
    unprepared, and never prepared on that alias again. Why and the limits: docs/performance.md, "One
    `send_mail()` on PostgreSQL: the statement prepared".
    """
    with binary_cursor(conn) as cursor:
        raw = conn.connection
        if not _may_prepare(conn, raw):
            cursor.execute(sql, params)
            return
        raw.prepare_threshold = 1  # psycopg's own cache: prepared on the second run of the same text
        try:
            cursor.execute(sql, params)
        except Exception as exc:
            if getattr(exc.__cause__, "sqlstate", None) != _LOST_STATEMENT:
                raise
            _UNPREPARED.add(conn.alias)
        else:
            return
        finally:
            raw.prepare_threshold = None
        cursor.execute(sql, params)  # threshold None: psycopg neither prepares nor uses what it prepared


def _may_prepare(conn: BaseDatabaseWrapper, raw: Any) -> bool:
    return (
        not conn.in_atomic_block
        and conn.alias not in _UNPREPARED
        and "prepare_threshold" not in conn.settings_dict.get("OPTIONS", {})
        and getattr(raw, "prepare_threshold", 0) is None  # psycopg 3 with preparing off (Django's default)
    )
