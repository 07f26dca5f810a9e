"""Threads for database work from the event loop, whose connections are closed with them."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

logger = logging.getLogger("django_mailqueue")
_T = TypeVar("_T")


def drop_if_broken(conn: BaseDatabaseWrapper) -> None:
    """After a database error, close a connection that no longer works (a restarted
    server, a terminated backend) so the next statement opens a new one. Unlike
    `close_if_unusable_or_obsolete`, a healthy connection is kept whatever
    `CONN_MAX_AGE` says: a worker's threads live long."""
    if conn.connection is not None and conn.errors_occurred:
        if conn.is_usable():
            conn.errors_occurred = False
        else:
            conn.close()


class DatabaseThreads:
    """At most `size` threads, so at most `size` connections to each database they use.

    Django's connections belong to the thread that opened them; `close()`
    stops the threads and then closes every connection they opened.
    """

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._seen: set[BaseDatabaseWrapper] = set()

    async def run(self, func: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.size, thread_name_prefix=self.name)
            pool = self._pool
        call = functools.partial(self._tracked, func, args, kwargs)
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    def _tracked(self, func: Callable[..., _T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _T:
        try:
            return func(*args, **kwargs)
        finally:
            opened = connections.all(initialized_only=True)
            with self._lock:
                self._seen.update(opened)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            seen, self._seen = self._seen, set()
        if pool is not None:
            pool.shutdown(wait=True)
        for wrapper in seen:
            # The threads are gone: their connections are closed from here.
            wrapper.inc_thread_sharing()
            try:
                wrapper.close()
            except DatabaseError:
                logger.debug("closing a worker thread's connection failed", exc_info=True)
            finally:
                wrapper.dec_thread_sharing()
