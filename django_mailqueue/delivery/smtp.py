"""`SmtpTransport`: the default `Transport` — SMTP sessions on aiosmtplib, with a connection cache.

One `send` is one session to one server address (`session.Session`: the
conversation; `transaction`: the message's transactions), under the
attempt's deadline, on a cached connection when one is idle for that
address, at most `destination_concurrency` at once to one address, at most
`Target.connections` open at once to one destination (its shaping key, idle
cached ones included), and at most `Target.messages_per_connection` messages
on one connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from . import aiosmtplib_adapter
from .aiosmtplib_adapter import Access
from .session import QUIT_TIMEOUT, Idle, Session, quit_and_close
from .transaction import transactions
from .transport import Envelope, SessionReport, Target

logger = logging.getLogger("django_mailqueue.delivery")

#: Seconds an idle connection is kept for the next message to the same server (Postfix's
#: smtp_connection_cache_time_limit).
CACHE_TIME = 2.0
#: Seconds a connection may be reused for in all (Postfix's smtp_connection_reuse_time_limit).
REUSE_TIME = 300.0
#: The most sessions at once to one server address (Postfix's default_destination_concurrency_limit).
DESTINATION_CONCURRENCY = 20

_CacheKey = tuple[str, int, str, str | None, str, int]


class SmtpTransport:
    """The default `Transport`: aiosmtplib sessions, with a connection cache.

    With `cache_time` above 0 (the worker uses `CACHE_TIME`), a connection
    whose transaction ended well is kept up to `cache_time`
    seconds for the next message to the same server address with
    the same TLS policy and credentials, as Postfix's connection cache does;
    at most `destination_concurrency` sessions run at once to one address. A
    cached connection that turns out to be closed is dropped and the message
    goes through a new one.
    """

    def __init__(
        self,
        *,
        cache_time: float = 0.0,
        reuse_time: float = REUSE_TIME,
        destination_concurrency: int = DESTINATION_CONCURRENCY,
    ) -> None:
        self.cache_time = cache_time
        self.reuse_time = reuse_time
        self.destination_concurrency = destination_concurrency
        self._idle: dict[_CacheKey, list[Idle]] = {}
        #: one timer a server address closes its pool's connections idle past `cache_time` with
        self._expiry: dict[_CacheKey, asyncio.TimerHandle] = {}
        self._limits: dict[tuple[str, int], asyncio.Semaphore] = {}
        #: sessions at once per destination (shaping key), with `Target.connections`
        self._destinations: dict[str, asyncio.Semaphore] = {}
        self._busy: Counter[str] = Counter()
        #: QUITs to connections leaving the cache, said in the background (`aclose` waits for them)
        self._quitting: set[asyncio.Task[None]] = set()
        #: how sessions use aiosmtplib (`aiosmtplib_adapter`: its private parts, or its public API only)
        self.access: Access = aiosmtplib_adapter.ACCESS
        self.access.announce()

    @staticmethod
    def _key(target: Target) -> _CacheKey:
        return (target.address, target.port, target.tls, target.username, target.helo_name, id(target.tls_context))

    def _take(self, key: _CacheKey, target: Target) -> Idle | None:
        now = asyncio.get_running_loop().time()
        pool = self._idle.get(key)
        per_connection = target.messages_per_connection
        while pool:
            idle = pool.pop()
            if (
                now - idle.idle_since <= self.cache_time
                and now - idle.opened <= self.reuse_time
                and (per_connection is None or idle.messages < per_connection)
                and idle.smtp.is_connected
            ):
                return idle
            self._retire(idle)
        return None

    def _make_room(self, target: Target) -> None:
        """Before a new connection to a destination at its CONNECTIONS: close its idle ones, the oldest
        first, so the open ones (in use and idle) stay within the limit."""
        if target.connections is None:
            return
        idle = sorted(
            (i for pool in self._idle.values() for i in pool if i.destination == target.destination),
            key=lambda i: i.idle_since,
        )
        while idle and self._busy[target.destination] + len(idle) > target.connections:
            oldest = idle.pop(0)
            for pool in self._idle.values():
                if oldest in pool:
                    pool.remove(oldest)
                    break
            self._retire(oldest)

    def _keep(self, key: _CacheKey, idle: Idle) -> None:
        pool = self._idle.setdefault(key, [])
        pool.append(idle)  # the pool stays oldest first: `_take` takes the newest
        if key not in self._expiry:
            self._expiry[key] = asyncio.get_running_loop().call_at(
                idle.idle_since + self.cache_time + 0.05, self._expire, key
            )

    def _expire(self, key: _CacheKey) -> None:
        """Close the pool's connections idle past `cache_time`; come back for the oldest left."""
        self._expiry.pop(key, None)
        loop = asyncio.get_running_loop()
        now = loop.time()
        pool = self._idle.get(key, [])
        for idle in [i for i in pool if now - i.idle_since > self.cache_time]:
            pool.remove(idle)
            self._retire(idle)
        if pool:
            self._expiry[key] = loop.call_at(pool[0].idle_since + self.cache_time + 0.05, self._expire, key)

    def _retire(self, idle: Idle) -> None:
        """A connection leaves the cache: QUIT (RFC 5321 §4.1.1.10) in the background, then close."""
        if not idle.smtp.is_connected:
            idle.smtp.close()
            return
        task = asyncio.get_running_loop().create_task(quit_and_close(idle.smtp, QUIT_TIMEOUT))
        self._quitting.add(task)
        task.add_done_callback(self._quitting.discard)

    async def send(self, target: Target, envelope: Envelope) -> SessionReport:
        if target.connections is None:
            return await self._send_to_address(target, envelope)
        slots = self._destinations.get(target.destination)
        if slots is None:
            slots = self._destinations[target.destination] = asyncio.Semaphore(target.connections)
        async with slots:
            self._busy[target.destination] += 1
            try:
                return await self._send_to_address(target, envelope)
            finally:
                self._busy[target.destination] -= 1

    async def _send_to_address(self, target: Target, envelope: Envelope) -> SessionReport:
        limit = self._limits.get((target.address, target.port))
        if limit is None:
            limit = self._limits[(target.address, target.port)] = asyncio.Semaphore(self.destination_concurrency)
        async with limit:
            key = self._key(target)
            cached = self._take(key, target)
            if cached is not None:
                report = await self._send(target, envelope, cached, key)
                if not report.stale_connection:
                    return report
                logger.debug("cached connection to %s was closed; opening a new one", target.label)
            if target.before_connect is not None:
                held = await target.before_connect()
                if held is not None:
                    return SessionReport(host=target.host, next_host=held, withheld=True)
            self._make_room(target)
            return await self._send(target, envelope, None, key)

    async def _send(self, target: Target, envelope: Envelope, cached: Idle | None, key: _CacheKey) -> SessionReport:
        report = SessionReport(host=target.host)
        session = Session(target, envelope, report, cached, keep=self.cache_time > 0, access=self.access)
        keep: Idle | None = None
        try:
            async with asyncio.timeout_at(target.deadline) as scope:
                keep = await _run(session)
        except TimeoutError:
            if not scope.expired():  # pragma: no cover - every step catches its own timeouts
                session.internal_error(RuntimeError("a timeout escaped the session"))
            else:
                session.deadline_passed()
        except Exception as exc:
            session.internal_error(exc)
        finally:
            if keep is None:
                session.close()
        if keep is not None:
            if target.messages_per_connection is not None and keep.messages >= target.messages_per_connection:
                self._retire(keep)  # MESSAGES_PER_CONNECTION: the next message opens a new one
            else:
                self._keep(key, keep)
        return report

    async def aclose(self) -> None:
        """Say QUIT on every cached connection, all at once, and close them: done within `QUIT_TIMEOUT`."""
        pools, self._idle = self._idle, {}
        for timer in self._expiry.values():
            timer.cancel()
        self._expiry.clear()
        for pool in pools.values():
            for idle in pool:
                self._retire(idle)
        if self._quitting:
            await asyncio.gather(*self._quitting, return_exceptions=True)


async def _run(session: Session) -> Idle | None:
    """The session; a connection worth keeping for the next message, or None."""
    if session.cached is not None:
        await transactions(session)
        if session.report.ended and not session.answered:
            session.report.stale_connection = True  # closed while idle: nothing was said, try a new one
            await session.quit()  # still open after a 421 to MAIL FROM
            return None
    elif await session.start():
        if session.target.accepted is not None:
            session.target.accepted()
        await transactions(session)
    if (
        session.smtp is None
        or not session.smtp.is_connected
        or session.report.ended
        or session.report.next_host
        or session.refused
        or not session.keep
    ):
        await session.quit()
        return None
    return await session.release()


__all__ = ["CACHE_TIME", "DESTINATION_CONCURRENCY", "REUSE_TIME", "SmtpTransport"]
