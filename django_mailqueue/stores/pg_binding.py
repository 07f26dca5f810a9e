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
    """A cursor for statements that write `%b` for every parameter (`in_binary` writes them).

    Django's own PostgreSQL cursor quotes each value into the statement's text in Python (its
    default, client-side binding); this one sends them apart, in binary — no escaping of texts,
    arrays or bytes. Django's wrapper stays around it: its error translation, query log and
    execute wrappers apply. psycopg prepares a statement on the server only when the database's
    `OPTIONS["prepare_threshold"]` asks it to (Django's default: never, as a pooler in transaction
    mode may sit between); the queue's statements are then prepared like any other.

    The psycopg cursor under the wrapper is kept with the connection and used again, never
    closed here: a new one each time would look up the dumper of every parameter's type anew
    (~60 µs a statement). So fetch a statement's rows before the next statement through any
    `binary_cursor` of the same connection, and read large results elsewhere: the cursor holds
    its last result until the next statement.
    """
    yield conn._prepare_cursor(_kept_cursor(conn))  # type: ignore[attr-defined]


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


def in_binary(sql: str) -> str:
    """`sql` with its `%s` placeholders as `%b` (binary parameters)."""
    return sql.replace("%s", "%b")
