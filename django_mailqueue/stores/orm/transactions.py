"""The ORM store's transactions: a write's (its own, or the caller's joined), statements outside one, a write in a
transaction of its own as the dialect runs those, and the database's errors as `STORE_UNAVAILABLE`."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ...core.errors import Code, QueueError
from .base import Dialect
from .threads import drop_if_broken

if TYPE_CHECKING:
    from .store import OrmStore

_T = TypeVar("_T")
_P = ParamSpec("_P")


def own_write(method: Callable[Concatenate[OrmStore, _P], _T]) -> Callable[Concatenate[OrmStore, _P], _T]:
    """`method` runs a write in a transaction of its own (outside the caller's), as its dialect runs those:
    on SQLite, waiting for the write lock up to the store's `lock_wait` in all."""

    @functools.wraps(method)
    def run(store: OrmStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return store.dialect.run_write(lambda: method(store, *args, **kwargs), lock_wait=store.lock_wait)

    return run


@contextlib.contextmanager
def write(alias: str, dialect: Dialect, *, join: bool = False, durable: bool = True) -> Iterator[BaseDatabaseWrapper]:
    """A transaction for a write: the caller's (with a savepoint) when `join` and
    one is open, else the store's own, begun as the dialect begins one.
    `durable=False`: renewals, which a crash may forget (`Dialect.atomic`)."""
    conn = connections[alias]
    try:
        if join and conn.in_atomic_block:
            with transaction.atomic(using=alias, savepoint=True):
                yield conn
            return
        if not conn.in_atomic_block:
            drop_if_broken(conn)
        with dialect.atomic(conn, durable=durable):
            yield conn
    except QueueError:
        raise
    except DatabaseError as exc:
        raise unavailable(exc) from exc


@contextlib.contextmanager
def errors(alias: str) -> Iterator[BaseDatabaseWrapper]:
    """Statements outside a transaction of the store's: a broken connection dropped first, errors as QueueErrors."""
    conn = connections[alias]
    if not conn.in_atomic_block:
        drop_if_broken(conn)
    try:
        yield conn
    except DatabaseError as exc:
        raise unavailable(exc) from exc


def unavailable(exc: DatabaseError) -> QueueError:
    """`exc` as the store's error (`STORE_UNAVAILABLE`)."""
    # The driver's text can name the host, never the password (Django does not put it
    # in errors); keep only the class and the first line to stay short.
    reason = str(exc).splitlines()[0] if str(exc) else ""
    return QueueError(Code.STORE_UNAVAILABLE, f"the database refused the operation: {type(exc).__name__}: {reason}")
