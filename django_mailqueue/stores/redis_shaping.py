"""The Redis store's traffic shaping: token buckets, suspensions, a destination's items deferred (read first)."""

from __future__ import annotations

import abc
import builtins
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from ..core.clock import from_micros, to_micros
from ..core.items import Reply
from ..core.shaping import FORGET_AFTER, Suspension, Window
from . import redis_scripts as scripts
from .base import QueueStore
from .inputs import check_aware, check_defer, check_key, check_probe, check_suspend, check_take
from .redis_clients import AsyncClient, SyncClient
from .redis_layout import Keys, fields, text

_R = TypeVar("_R")
_FORGET_US = FORGET_AFTER // timedelta(microseconds=1)
#: The most items one `defer_destination` script call examines: a suspended destination with tens of thousands
#: waiting is moved in slices of a few milliseconds each, never one call that blocks the server (and every
#: other client) for seconds.
DEFER_SLICE = 1000


@dataclass(frozen=True)
class _Call(Generic[_R]):
    """One script call and how its reply reads."""

    script: scripts.LuaScript
    keys: Sequence[str]
    args: Sequence[scripts.Arg]
    read: Callable[[Any], _R]
    #: followed by the store's WAIT (`sync_replicas`): not the token buckets', whose loss only refills a bucket
    waits: bool = True


class RedisShaping(QueueStore):
    """The shaping methods of `RedisStore`, sync and async, each one script (one round trip); `defer_destination`
    one a slice of `DEFER_SLICE` items."""

    keys: Keys
    key_prefix: str
    #: the WAIT after a write (`sync_replicas`), or None
    wait: scripts.Wait | None

    @abc.abstractmethod
    def _do(self, work: Callable[[SyncClient[bytes]], _R]) -> _R: ...

    @abc.abstractmethod
    async def _ado(self, work: Callable[[AsyncClient[bytes]], Awaitable[_R]]) -> _R: ...

    def _run(self, call: _Call[_R]) -> _R:
        wait = self.wait if call.waits else None
        return self._do(lambda client: call.read(call.script.run(client, call.keys, call.args, wait)))

    async def _arun(self, call: _Call[_R]) -> _R:
        wait = self.wait if call.waits else None

        async def work(client: AsyncClient[bytes]) -> _R:
            return call.read(await call.script.arun(client, call.keys, call.args, wait))

        return await self._ado(work)

    # --- the calls ----------------------------------------------------------------------

    def _take(
        self,
        key: str,
        rate: float,
        burst: int,
        want: int,
        now: datetime,
        window: Window | None,
        done: int,
        ended: float,
    ) -> _Call[int]:
        check_take(key, rate, burst, want, now, window, done, ended)
        args = [repr(float(rate)), str(burst), str(want), str(to_micros(now))]
        if window is not None:
            args += [str(window.cap), str(window.period), str(window.expire), str(done), str(round(ended * 1e6))]
        return _Call(scripts.TAKE_TOKENS, [self.keys.bucket(key)], args, int, waits=False)

    def _forgotten(self, now: datetime) -> tuple[scripts.Arg, ...]:
        """The read before a suspension: the destinations whose records are forgotten by now (suspend.lua)."""
        return ("ZRANGEBYSCORE", self.keys.suspended, "-inf", str(to_micros(now) - _FORGET_US))

    def _in_force(self, now: datetime) -> tuple[scripts.Arg, ...]:
        """The read before `suspensions()` of every destination: those suspended after now."""
        return ("ZRANGEBYSCORE", self.keys.suspended, f"({to_micros(now)}", "+inf")

    def _suspend(
        self, destination: str, until: datetime, reply: Reply, now: datetime, forgotten: Sequence[bytes]
    ) -> _Call[Suspension]:
        args: list[scripts.Arg] = [
            self.keys.prefix,
            destination,
            str(to_micros(until)),
            str(to_micros(now)),
            str(_FORGET_US),
            "" if reply.code is None else str(reply.code),
            reply.status,
            reply.text,
            *forgotten,
        ]
        keys = [
            self.keys.suspended,
            self.keys.suspension(destination),
            self.keys.probe(destination),
            *(self.keys.suspension(text(gone)) for gone in forgotten),
        ]

        def read(raw: Any) -> Suspension:
            ends, since, strikes = (int(text(part)) for part in raw)
            return Suspension(destination, from_micros(ends), reply, from_micros(since), strikes)

        return _Call(scripts.SUSPEND, list(dict.fromkeys(keys)), args, read)

    def _suspensions(self, now: datetime, destinations: Sequence[str]) -> _Call[builtins.list[Suspension]]:
        wanted = list(dict.fromkeys(destinations))
        args = [self.keys.prefix, str(to_micros(now)), *wanted]
        keys = [self.keys.suspension(destination) for destination in wanted]
        return _Call(scripts.SUSPENSIONS, keys, args, _read_suspensions, waits=False)

    def _take_probe(
        self, destination: str, holder: str, until: datetime, now: datetime
    ) -> _Call[Suspension | datetime | None]:
        check_probe(destination, holder, until, now)
        keys = [self.keys.suspension(destination), self.keys.probe(destination)]
        args = [str(to_micros(now)), str(to_micros(until)), holder]

        def read(raw: Any) -> Suspension | datetime | None:
            kind = int(raw[0])
            if kind == 0:
                return None
            if kind == 2:
                return from_micros(int(text(raw[1])))
            ends, since, strikes, code, status, said = (text(part) for part in raw[1:7])
            reply = Reply(int(code) if code else None, status, said)
            return Suspension(destination, from_micros(int(ends)), reply, from_micros(int(since)), int(strikes))

        return _Call(scripts.TAKE_PROBE, keys, args, read, waits=False)

    def _end_probe(self, destination: str, holder: str) -> _Call[bool]:
        check_key(destination, "a destination")
        check_key(holder, "a probe's holder")
        return _Call(scripts.END_PROBE, [self.keys.probe(destination)], [holder], lambda raw: int(raw) > 0, waits=False)

    def _clear(self, destination: str) -> _Call[bool]:
        check_key(destination, "a destination")
        keys = [self.keys.suspended, self.keys.suspension(destination)]
        return _Call(scripts.CLEAR_SUSPENSION, keys, [destination], lambda raw: int(raw) > 0)

    def _defer_read(self, domains: Sequence[str], until: datetime, place: tuple[int, int]) -> _DeferRead:
        """The read before a slice: from `place` (a domain's set, members passed over in it), up to `DEFER_SLICE`
        members before `until`, then each one's queue and domains (the keys the slice's script declares)."""
        wanted = sorted({domain.lower() for domain in domains})
        return _DeferRead(self.keys, wanted, self.keys.domain(wanted[place[0] - 1]), f"({to_micros(until)}", place[1])

    def _defer(
        self, read: _DeferRead, found: Sequence[bytes], shapes: Sequence[Any], until: datetime, now: datetime
    ) -> _Call[int]:
        """One slice: defer_destination.lua on the candidates read, their keys declared; how many moved."""
        keys = [self.keys.leases, self.keys.items, self.keys.queues, *self.keys.indexes]
        for member, (queue, held) in zip(found, shapes, strict=True):
            item_id = text(member)[17:]
            keys.append(self.keys.item(item_id))
            if queue is not None:
                keys += [self.keys.ready(text(queue)), *self.keys.of_shape(text(queue), text(held or b""))]
        times = [str(to_micros(until)), str(to_micros(now))]
        args: builtins.list[scripts.Arg] = [self.keys.prefix, *times, str(len(found)), *found, *read.domains]
        return _Call(scripts.DEFER_DESTINATION, list(dict.fromkeys(keys)), args, int)

    @staticmethod
    def _after(read: _DeferRead, place: tuple[int, int], found: int, moved: int) -> tuple[int, int] | None:
        """The next slice's place: past those left in place, or the next domain's set once this one gave fewer
        than a slice (None after the last)."""
        if found == DEFER_SLICE:
            return place[0], place[1] + found - moved
        return None if place[0] == len(read.domains) else (place[0] + 1, 0)

    # --- the methods --------------------------------------------------------------------

    def take_tokens(
        self,
        key: str,
        *,
        rate: float,
        burst: int,
        want: int,
        now: datetime,
        window: Window | None = None,
        done: int = 0,
        ended: float = 0.0,
    ) -> int:
        return self._run(self._take(key, rate, burst, want, now, window, done, ended))

    async def atake_tokens(
        self,
        key: str,
        *,
        rate: float,
        burst: int,
        want: int,
        now: datetime,
        window: Window | None = None,
        done: int = 0,
        ended: float = 0.0,
    ) -> int:
        return await self._arun(self._take(key, rate, burst, want, now, window, done, ended))

    # A suspension and the suspensions of every destination read the destinations first (their records' keys
    # are then declared: docs/redis.md, "The scripts"); a suspension is rare, `suspensions()` a refresh.

    def _shaping_read(self, command: tuple[scripts.Arg, ...]) -> builtins.list[bytes]:
        return builtins.list(self._do(lambda client: client.execute_command(*command)))  # type: ignore[no-untyped-call, unused-ignore]

    async def _ashaping_read(self, command: tuple[scripts.Arg, ...]) -> builtins.list[bytes]:
        async def work(client: AsyncClient[bytes]) -> Any:
            return await client.execute_command(*command)  # type: ignore[no-untyped-call, unused-ignore]

        return builtins.list(await self._ado(work))

    def suspend(self, destination: str, *, until: datetime, reply: Reply, now: datetime) -> Suspension:
        check_suspend(destination, until, reply, now)
        forgotten = self._shaping_read(self._forgotten(now))
        return self._run(self._suspend(destination, until, reply, now, forgotten))

    async def asuspend(self, destination: str, *, until: datetime, reply: Reply, now: datetime) -> Suspension:
        check_suspend(destination, until, reply, now)
        forgotten = await self._ashaping_read(self._forgotten(now))
        return await self._arun(self._suspend(destination, until, reply, now, forgotten))

    def suspensions(self, *, now: datetime, destinations: Sequence[str] | None = None) -> builtins.list[Suspension]:
        check_aware(now, "now")
        wanted = destinations
        if wanted is None:
            wanted = [text(d) for d in self._shaping_read(self._in_force(now))]
        return self._run(self._suspensions(now, wanted)) if wanted else []

    async def asuspensions(
        self, *, now: datetime, destinations: Sequence[str] | None = None
    ) -> builtins.list[Suspension]:
        check_aware(now, "now")
        wanted = destinations
        if wanted is None:
            wanted = [text(d) for d in await self._ashaping_read(self._in_force(now))]
        return await self._arun(self._suspensions(now, wanted)) if wanted else []

    def clear_suspension(self, destination: str) -> bool:
        return self._run(self._clear(destination))

    async def aclear_suspension(self, destination: str) -> bool:
        return await self._arun(self._clear(destination))

    def take_probe(
        self, destination: str, *, holder: str, until: datetime, now: datetime
    ) -> Suspension | datetime | None:
        return self._run(self._take_probe(destination, holder, until, now))

    async def atake_probe(
        self, destination: str, *, holder: str, until: datetime, now: datetime
    ) -> Suspension | datetime | None:
        return await self._arun(self._take_probe(destination, holder, until, now))

    def end_probe(self, destination: str, *, holder: str) -> bool:
        return self._run(self._end_probe(destination, holder))

    async def aend_probe(self, destination: str, *, holder: str) -> bool:
        return await self._arun(self._end_probe(destination, holder))

    def defer_destination(self, domains: Sequence[str], *, until: datetime, now: datetime) -> int:
        check_defer(domains, until, now)
        total, place = 0, (1, 0) if domains else None
        while place is not None:
            read = self._defer_read(domains, until, place)
            found, shapes = self._do(read.sync)
            moved = self._run(self._defer(read, found, shapes, until, now)) if found else 0
            total += moved
            place = self._after(read, place, len(found), moved)
        return total

    async def adefer_destination(self, domains: Sequence[str], *, until: datetime, now: datetime) -> int:
        check_defer(domains, until, now)
        total, place = 0, (1, 0) if domains else None
        while place is not None:
            read = self._defer_read(domains, until, place)
            found, shapes = await self._ado(read.asynchronous)
            moved = await self._arun(self._defer(read, found, shapes, until, now)) if found else 0
            total += moved
            place = self._after(read, place, len(found), moved)
        return total


@dataclass(frozen=True)
class _DeferRead:
    """The read of one slice's candidates: `DEFER_SLICE` members of a domain's set from `skip` on, scored before
    `before`, then each one's queue and domains (`HMGET`)."""

    keys: Keys
    domains: Sequence[str]
    candidates: str
    before: str
    skip: int

    def _range(self) -> tuple[scripts.Arg, ...]:
        return ("ZRANGEBYSCORE", self.candidates, "-inf", self.before, "LIMIT", self.skip, DEFER_SLICE)

    def sync(self, client: SyncClient[bytes]) -> tuple[builtins.list[bytes], builtins.list[Any]]:
        found = builtins.list(client.execute_command(*self._range()))  # type: ignore[no-untyped-call, unused-ignore]
        if not found:
            return [], []
        pipe = client.pipeline(transaction=False)
        for member in found:
            pipe.execute_command("HMGET", self.keys.item(text(member)[17:]), "queue", "domains")  # type: ignore[no-untyped-call]
        return found, pipe.execute()

    async def asynchronous(self, client: AsyncClient[bytes]) -> tuple[builtins.list[bytes], builtins.list[Any]]:
        found = builtins.list(await client.execute_command(*self._range()))  # type: ignore[no-untyped-call, unused-ignore]
        if not found:
            return [], []
        pipe = client.pipeline(transaction=False)
        for member in found:
            pipe.execute_command("HMGET", self.keys.item(text(member)[17:]), "queue", "domains")
        return found, await pipe.execute()


def _read_suspensions(raw: Any) -> builtins.list[Suspension]:
    found = []
    for i in range(0, len(raw), 2):
        f = fields(raw[i + 1])
        found.append(
            Suspension(
                destination=text(raw[i]),
                until=from_micros(int(f["until"])),
                reply=Reply(int(f["code"]) if f["code"] else None, f["status"], f["text"]),
                since=from_micros(int(f["since"])),
                strikes=int(f["strikes"]),
            )
        )
    return sorted(found, key=lambda s: s.destination)
