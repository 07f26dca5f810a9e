"""The Redis store's claim: the due candidates read in one pipeline, then claim.lua run on them with every key it
touches declared, and read again when another worker took some first (docs/redis.md, "The scripts"); a claimed
batch's suppression look-up and messages then read in one pipeline more (`aclaim_batch`)."""

from __future__ import annotations

import abc
import builtins
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core.clock import to_micros
from ..core.errors import QueueError
from ..core.items import QueueItem
from . import redis_scripts as scripts
from .base import QueueStore
from .claimed_batch import ClaimedBatch, listed_by_item, pending_keys, small_ids
from .inputs import check_owner
from .kept import Kept
from .redis_clients import AsyncClient, SyncClient, T
from .redis_layout import Keys, Shapes, item_of, text
from .redis_suppression import live_entries

#: The most read-then-claim rounds a claim makes while other workers take its candidates first: each round that
#: goes again does so because another claim took (or dropped) what this one read, so they do not go on for long.
ROUNDS = 8

#: the fields of a claimed item claim.lua answers with, in its order (`FIELDS` there)
CLAIMED_FIELDS = (
    "id", "sender", "rcpts", "size", "created", "next", "attempts", "queue", "owner", "expires", "rev",
    "reclaims", "delay", "mid", "subject", "failed", "domains", "words",
)  # fmt: skip


class Claimed(Kept[QueueItem]):
    """The items this store claimed, as its claims left them, until their completion: complete.lua checks the
    owner and revision itself, so a completion made from the claimed item needs no read of it first (every
    change to an item's outcome fields bumps its revision). Past `MOST` items the oldest are forgotten (their
    completions then read the item, as any completion of an item this store did not claim)."""

    def add(self, item: QueueItem) -> None:
        self.put([(item.id, item)])

    def take(self, item_id: uuid.UUID, owner: str, revision: int) -> QueueItem | None:
        """The item as claimed by `owner` at `revision` (and forgotten), or None."""
        (item,) = self.pop([item_id])
        return item if item is not None and item.owner == owner and item.revision == revision else None


@dataclass(frozen=True)
class _Ask:
    owner: str
    now: str
    expires: str
    limit: int
    #: the queues in the order they are served; None: every queue, merged
    lanes: tuple[str, ...] | None


@dataclass(frozen=True)
class _Read:
    """What a claim read: the expired leases, and each queue's first due members (all queues: of `queues`)."""

    expired: builtins.list[bytes]
    ready: builtins.list[tuple[str, builtins.list[bytes]]]


class RedisClaiming(QueueStore):
    """`claim` and `aclaim` of `RedisStore`."""

    keys: Keys
    wait: scripts.Wait | None
    _shapes: Shapes
    _claimed: Claimed
    #: the queue names `<prefix>queues` held at the last claim of every queue: read with it in one round trip
    _queue_names: builtins.list[str]

    @abc.abstractmethod
    def _do(self, work: Callable[[SyncClient[bytes]], T]) -> T: ...

    @abc.abstractmethod
    async def _ado(self, work: Callable[[AsyncClient[bytes]], Awaitable[T]]) -> T: ...

    @abc.abstractmethod
    def _marker(self) -> builtins.list[str]: ...

    def claim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> builtins.list[QueueItem]:
        ask = self._ask(owner, now, lease_expires, queues, limit)
        claimed: builtins.list[QueueItem] = []
        if ask is None:
            return claimed
        for _ in range(ROUNDS):
            want = ask.limit - len(claimed)
            cached = list(self._queue_names) if ask.lanes is None else []
            commands = self._reads(ask, want, cached)

            def read(
                client: SyncClient[bytes], commands: Any = commands, want: int = want, cached: Any = cached
            ) -> _Read:
                pipe = client.pipeline(transaction=False)
                for command in commands:
                    pipe.execute_command(*command)  # type: ignore[no-untyped-call, unused-ignore]
                replies = pipe.execute()
                more = self._more_reads(ask, want, cached, replies)
                if more:
                    pipe = client.pipeline(transaction=False)
                    for command in more:
                        pipe.execute_command(*command)  # type: ignore[no-untyped-call, unused-ignore]
                    replies += pipe.execute()
                return self._read(ask, cached, replies)

            call = self._call(ask, want, self._do(read))
            if call is None:
                break

            def write(client: SyncClient[bytes], call: scripts.Call = call) -> Any:
                return scripts.CLAIM.run(client, *call, self.wait)

            if self._took(self._do(write), claimed, ask.limit):
                break
        return claimed

    async def aclaim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> builtins.list[QueueItem]:
        ask = self._ask(owner, now, lease_expires, queues, limit)
        claimed: builtins.list[QueueItem] = []
        if ask is None:
            return claimed
        for _ in range(ROUNDS):
            want = ask.limit - len(claimed)
            cached = list(self._queue_names) if ask.lanes is None else []
            commands = self._reads(ask, want, cached)

            async def read(
                client: AsyncClient[bytes], commands: Any = commands, want: int = want, cached: Any = cached
            ) -> _Read:
                pipe = client.pipeline(transaction=False)
                for command in commands:
                    pipe.execute_command(*command)
                replies = await pipe.execute()
                more = self._more_reads(ask, want, cached, replies)
                if more:
                    pipe = client.pipeline(transaction=False)
                    for command in more:
                        pipe.execute_command(*command)
                    replies += await pipe.execute()
                return self._read(ask, cached, replies)

            call = self._call(ask, want, await self._ado(read))
            if call is None:
                break

            async def write(client: AsyncClient[bytes], call: scripts.Call = call) -> Any:
                return await scripts.CLAIM.arun(client, *call, self.wait)

            if self._took(await self._ado(write), claimed, ask.limit):
                break
        return claimed

    async def aclaim_batch(
        self,
        *,
        owner: str,
        now: datetime,
        lease_expires: datetime,
        queues: Sequence[str] | None = None,
        limit: int = 1,
        suppressed_since: datetime | None = None,
        read_up_to: int = 0,
    ) -> ClaimedBatch:
        """`aclaim`, then the suppression list's `HMGET` and the messages' `MGET` in one pipeline: one round trip
        for both reads (an error of it is both reads' error)."""
        batch = ClaimedBatch(
            await self.aclaim(owner=owner, now=now, lease_expires=lease_expires, queues=queues, limit=limit)
        )
        keys = pending_keys(batch.items) if suppressed_since is not None and batch.items else {}
        wanted = sorted(set(keys.values()))
        small = small_ids(batch.items, read_up_to)
        commands: builtins.list[tuple[scripts.Arg, ...]] = []
        if wanted:
            commands.append(("HMGET", self.keys.suppressed, *wanted))
        if small:
            commands.append(("MGET", *(self.keys.message(item_id) for item_id in small)))

        async def read(client: AsyncClient[bytes]) -> builtins.list[Any]:
            pipe = client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            return builtins.list(await pipe.execute())

        try:
            replies = await self._ado(read) if commands else []
        except QueueError as exc:
            batch.listed_error = exc if suppressed_since is not None else None
            batch.messages_error = exc if small else None
            return batch
        if suppressed_since is not None and batch.items:
            found = live_entries(wanted, replies[0], suppressed_since) if wanted else {}
            batch.listed = listed_by_item(batch.items, keys, found)
        if small:
            raws = replies[-1]
            batch.messages = {i: bytes(raw) for i, raw in zip(small, raws, strict=True) if raw is not None}
        return batch

    def _ask(
        self, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None, limit: int
    ) -> _Ask | None:
        check_owner(owner)
        if limit < 1 or (queues is not None and not queues):
            return None
        lanes = tuple(dict.fromkeys(queues)) if queues is not None else None
        return _Ask(owner, str(to_micros(now)), str(to_micros(lease_expires)), limit, lanes)

    def _ready_read(self, queue: str, ask: _Ask, want: int) -> tuple[scripts.Arg, ...]:
        return ("ZRANGEBYSCORE", self.keys.ready(queue), "-inf", ask.now, "LIMIT", 0, want)

    def _reads(self, ask: _Ask, want: int, cached: builtins.list[str]) -> builtins.list[tuple[scripts.Arg, ...]]:
        """The first round trip: the expired leases, `queues` (all queues), and the ready sets of the queues
        served (all queues: of those `queues` held last time)."""
        commands: builtins.list[tuple[scripts.Arg, ...]] = [("ZRANGEBYSCORE", self.keys.leases, "-inf", ask.now)]
        if ask.lanes is None:
            commands.append(("SMEMBERS", self.keys.queues))
        lanes = ask.lanes if ask.lanes is not None else cached
        return commands + [self._ready_read(queue, ask, want) for queue in lanes]

    def _more_reads(
        self, ask: _Ask, want: int, cached: builtins.list[str], replies: builtins.list[Any]
    ) -> builtins.list[tuple[scripts.Arg, ...]]:
        """A second round trip when `queues` holds a queue the first did not read."""
        if ask.lanes is not None:
            return []
        known = set(cached)
        return [self._ready_read(queue, ask, want) for queue in _names(replies[1]) if queue not in known]

    def _read(self, ask: _Ask, cached: builtins.list[str], replies: builtins.list[Any]) -> _Read:
        if ask.lanes is not None:
            return _Read(list(replies[0]), list(zip(ask.lanes, replies[1:], strict=True)))
        names = _names(replies[1])
        known = set(cached)
        read = dict(zip([*cached, *(q for q in names if q not in known)], replies[2:], strict=True))
        self._queue_names = names
        return _Read(list(replies[0]), [(queue, list(read[queue])) for queue in names])

    def _call(self, ask: _Ask, want: int, read: _Read) -> scripts.Call | None:
        """claim.lua's keys and arguments for the candidates read; None when there are none."""
        if not read.expired and not any(members for _, members in read.ready):
            return None
        keys = [self.keys.leases, self.keys.items, self.keys.queues]
        args: builtins.list[scripts.Arg] = [
            self.keys.prefix,
            ask.owner,
            ask.now,
            ask.expires,
            str(want),
            "all" if ask.lanes is None else "lanes",
            str(len(read.ready)),
        ]
        for queue, members in read.ready:
            keys.append(self.keys.ready(queue))
            args += [queue, str(len(members)), *members]
            keys += self._candidate_keys(members)
        args += [str(len(read.expired)), *read.expired]
        keys += self._candidate_keys(read.expired)
        return [*dict.fromkeys(keys), *self._marker()], args

    def _candidate_keys(self, members: builtins.list[bytes]) -> builtins.list[str]:
        keys = []
        for member in members:
            item_id = member[17:].decode()
            keys += [self.keys.item(item_id), self.keys.message(item_id)]
        return keys

    def _took(self, reply: Any, claimed: builtins.list[QueueItem], limit: int) -> bool:
        """Adds the claimed items to `claimed` (their queue and domains noted: the keys a later reschedule
        declares); whether the claim is done (no candidate lost to another worker, or `limit` reached)."""
        for raw in reply[1:]:
            found = {name: value.decode() for name, value in zip(CLAIMED_FIELDS, raw, strict=True) if value is not None}
            item = item_of(found)
            self._shapes.note(item.id, found)
            self._claimed.add(item)
            claimed.append(item)
        return int(reply[0]) == 0 or len(claimed) >= limit


def _names(raw: Any) -> builtins.list[str]:
    return sorted(text(name) for name in raw)
