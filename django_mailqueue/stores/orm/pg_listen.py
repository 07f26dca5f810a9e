"""Waking idle workers on PostgreSQL: a LISTEN connection that waits for an add's NOTIFY."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger("django_mailqueue.stores.orm")

_LIBPQ_OPTIONS = (
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "options",
    "connect_timeout",
    "application_name",
    "target_session_attrs",
    "service",
    "passfile",
)


class PgListener:
    """One async psycopg connection, opened on first use, listening on `channel`.

    A notification that arrives between two waits is kept by the connection and
    ends the next wait at once, so no add is missed. When PostgreSQL is out of
    reach the wait sleeps instead and the connection is opened again next time.
    """

    def __init__(self, settings_dict: Mapping[str, Any], channel: str) -> None:
        self._settings = settings_dict
        self._channel = channel
        self._conn: Any = None

    def _conninfo(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "dbname": self._settings.get("NAME") or "postgres",
            "user": self._settings.get("USER") or None,
            "password": self._settings.get("PASSWORD") or None,
            "host": self._settings.get("HOST") or None,
            "port": str(self._settings.get("PORT")) if self._settings.get("PORT") else None,
            "autocommit": True,
        }
        options = self._settings.get("OPTIONS") or {}
        params.update({k: v for k, v in options.items() if k in _LIBPQ_OPTIONS})
        return {k: v for k, v in params.items() if v is not None}

    async def _connect(self) -> Any:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(**self._conninfo())
        try:
            await conn.execute(f'LISTEN "{self._channel}"')
        except BaseException:  # the wait's timeout cancelled it, or LISTEN failed: no connection left open
            await conn.close()
            raise
        return conn

    async def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a notification; True if one came."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            if self._conn is None or self._conn.closed:
                self._conn = await asyncio.wait_for(self._connect(), timeout)
            remaining = max(0.0, deadline - loop.time())
            async for _ in self._conn.notifies(timeout=remaining, stop_after=1):
                return True
            return False
        except Exception as exc:  # noqa: BLE001 - any failure falls back to polling
            logger.warning("listening for new mail failed (%s); polling instead", type(exc).__name__)
            await self.close()
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            return False

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
