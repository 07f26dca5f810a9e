"""SQLite's one write lock: a transaction the store runs itself waits for it, within a bound, instead of failing."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from ...core.errors import QueueError

_T = TypeVar("_T")

#: How long a write waits for the lock in all, unless told otherwise (the ORM store's `lock_wait` option).
LOCK_WAIT = 30.0
#: The busy timeout of one try: short tries keep every waiter looking for the lock often, where SQLite's
#: busy handler would let newer connections take it first (docs/performance.md, "SQLite write lock").
TRY_WAIT = 0.2
_TRY_PRAGMA = f"PRAGMA busy_timeout = {round(TRY_WAIT * 1000)}"
#: SQLITE_BUSY and SQLITE_LOCKED: another connection holds the lock (the primary code of an extended one).
_BUSY_CODES = (5, 6)


def is_busy(exc: BaseException) -> bool:
    """Whether `exc` (a QueueError or Django's DatabaseError, by its causes) is SQLite's "database is locked"."""
    cause: BaseException | None = exc
    for _ in range(4):
        if cause is None:
            break
        code = getattr(cause, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in _BUSY_CODES
        cause = cause.__cause__
    return False


def wait_for_lock(conn: BaseDatabaseWrapper, write: Callable[[], _T], *, wait: float = LOCK_WAIT) -> _T:
    """`write()` — a transaction of its own on `conn`, rolled back when it fails — tried again while it
    fails because other connections hold the write lock, until `wait` seconds have passed since the call.

    Each try waits at most `TRY_WAIT` for the lock; the connection's own busy timeout (Django's
    `timeout` option) is put back afterwards. Past `wait`, the last try's error is raised.
    """
    deadline = time.monotonic() + wait
    raw: sqlite3.Connection | None = None
    configured = 0
    try:
        while True:
            remaining = deadline - time.monotonic()
            try:
                if conn.connection is None:
                    conn.ensure_connection()
                if conn.connection is not raw:  # the first try, or a broken connection was replaced
                    raw = conn.connection
                    configured = int(raw.execute("PRAGMA busy_timeout").fetchone()[0])
                raw.execute(
                    _TRY_PRAGMA if remaining >= TRY_WAIT else f"PRAGMA busy_timeout = {max(1, round(remaining * 1000))}"
                )
            except (DatabaseError, sqlite3.Error):
                return write()  # the database cannot be opened: the write fails as it does without waiting
            try:
                return write()
            except (QueueError, DatabaseError) as exc:
                if not is_busy(exc) or time.monotonic() >= deadline:
                    raise
    finally:
        if raw is not None:
            try:
                raw.execute(f"PRAGMA busy_timeout = {configured}")
            except sqlite3.Error:  # closed meanwhile (a broken connection is dropped): nothing to put back
                pass
