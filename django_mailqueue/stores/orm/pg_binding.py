"""PostgreSQL cursors that send the parameters apart from the statement, in binary (psycopg 3)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

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
    setattr(conn, _KEPT, (raw, cursor))
    return cursor
