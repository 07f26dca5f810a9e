"""PostgreSQL cursors that send the parameters apart from the statement, in binary (psycopg 3)."""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper


def binary_cursor(conn: BaseDatabaseWrapper) -> CursorWrapper:
    """A cursor for statements that write `%b` for every parameter (`in_binary` writes them).

    Django's own PostgreSQL cursor quotes each value into the statement's text in Python (its
    default, client-side binding); this one sends them apart, in binary — no escaping of texts,
    arrays or bytes. Django's wrapper stays around it: its error translation, query log and
    execute wrappers apply. psycopg prepares a statement on the server only when the database's
    `OPTIONS["prepare_threshold"]` asks it to (Django's default: never, as a pooler in transaction
    mode may sit between); the queue's statements are then prepared like any other."""
    import psycopg

    conn.ensure_connection()
    with conn.wrap_database_errors:
        return conn._prepare_cursor(psycopg.Cursor(conn.connection))  # type: ignore[attr-defined,no-any-return]


def in_binary(sql: str) -> str:
    """`sql` with its `%s` placeholders as `%b` (binary parameters)."""
    return sql.replace("%s", "%b")
