"""`RedisStore`: the contract on one Redis (a primary with replicas, Sentinel, or a Cluster), one Lua script per
write."""

from __future__ import annotations

import builtins
import functools
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core.clock import to_micros
from ..core.errors import Code, QueueError
from ..core.items import (
    CompleteRequest,
    Completion,
    ItemOrder,
    NewItem,
    QueueItem,
    apply_completion,
    as_added,
)
from . import redis_connection as conn
from . import redis_scripts as scripts
from . import redis_sentinel as sentinel
from .base import AlsoWrite
from .inputs import check_completion, check_new_item, check_owner
from .redis_claiming import Claimed, RedisClaiming
from .redis_clients import AsyncClient, RedisClients, SyncClient, T
from .redis_failed import RedisFailed
from .redis_layout import (
    LAYOUT_VERSION,
    SHAPE,
    Keys,
    Shapes,
    domains,
    dump_recipients,
    fields,
    item_args,
    item_of,
    layout_prefix,
    suppression_args,
    text,
    to_item_or_none,
    words,
)
from .redis_messages import RedisMessages, _hgetall
from .redis_reading import RedisReading
from .redis_shaping import RedisShaping
from .redis_suppression import RedisSuppressionList

logger = logging.getLogger("django_mailqueue.stores.redis")


@dataclass(frozen=True)
class _AddPlan:
    keys: tuple[str, ...]
    args: tuple[scripts.Arg, ...]
    added: tuple[QueueItem, ...]
    shapes: tuple[tuple[str, str, str], ...]


class RedisStore(RedisClaiming, RedisMessages, RedisReading, RedisSuppressionList, RedisShaping, RedisFailed):
    """Items in Redis under `OPTIONS["key_prefix"]`, reached by `url` or a django-redis `cache` alias.

    Every write is one Lua script, which Redis runs whole, so claims are atomic
    across processes and machines. The backend and the admin use a sync client,
    the worker's async twins an asyncio client, both from the same settings.
    Nothing connects until the first call. An add is not part of the database
    transaction; with `on_commit` an add inside `transaction.atomic()` waits for
    the commit (see docs/redis.md for the trade-off).
    """

    supports_wakeup = True
    supports_transactional_add = False
    #: the items sorted set gives the next-attempt order either way; no key orders the items by age
    orders = frozenset({ItemOrder.NEXT_ATTEMPT, ItemOrder.NEXT_ATTEMPT_DESC})
    #: the state, queue and domain filters read sorted sets the scripts keep (select.lua)
    bounded_counts = True

    def __new__(
        cls, options: Mapping[str, Any] | None = None, *, max_items: int | None = None, partition: int | None = None
    ) -> RedisStore:
        """A queue of several `partitions` on a Cluster is a `PartitionedRedisStore`, one `RedisStore` a part."""
        if cls is RedisStore and partition is None and _partitions(options) > 1:
            from .redis_partitions import PartitionedRedisStore

            return super().__new__(PartitionedRedisStore)
        return super().__new__(cls)

    def __init__(
        self, options: Mapping[str, Any] | None = None, *, max_items: int | None = None, partition: int | None = None
    ) -> None:
        super().__init__(options, max_items=max_items)
        self.key_prefix: str = self.options.get("key_prefix", conn.DEFAULT_PREFIX)
        #: on a Redis Cluster, every key under a hash tag of the prefix's: one slot, so scripts may touch them all
        self.cluster: bool = bool(self.options.get("cluster", False))
        #: which part of a partitioned queue this store is (0: the whole queue, or its first part)
        self.partition = partition or 0
        self.keys = Keys(
            layout_prefix(
                self.key_prefix, cluster=self.cluster, partition=self.partition, partitions=_partitions(options)
            )
        )
        #: the queue and domains of the items met, for the keys a script declares
        self._shapes = Shapes()
        #: the items claimed, as claimed, until completed: a completion without a read first
        self._claimed = Claimed()
        self._queue_names: builtins.list[str] = []
        self.on_commit: bool = bool(self.options.get("on_commit", False))
        timeout = float(self.options.get("socket_timeout", conn.DEFAULT_SOCKET_TIMEOUT))
        failover_timeout = conn.failover_timeout(self.options)
        self._clients = RedisClients(
            self.keys,
            url=self.options.get("url"),
            cache=self.options.get("cache"),
            password=self.options.get("password"),
            timeout=timeout,
            sentinel_spec=sentinel.spec_from_options(self.options) if self.options.get("sentinels") else None,
            failover_timeout=failover_timeout,
            cluster=self.cluster,
        )
        replicas = int(self.options.get("sync_replicas", 0))
        sync_timeout = float(self.options.get("sync_timeout", conn.DEFAULT_SYNC_TIMEOUT))
        #: the WAIT after each write (None: sync_replicas 0)
        self.wait = scripts.Wait(replicas, max(1, round(sync_timeout * 1000))) if replicas else None
        # A marker outlives every retry of its call: the first try may wait a socket timeout for its answer.
        self._replay_ms = math.ceil((timeout + failover_timeout) * 1000) + 5000 if failover_timeout > 0 else 0

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> builtins.list[str]:
        return conn.check_options(options)

    @property
    def place(self) -> str:
        """Where the store's Redis is, as it may be shown: no credentials."""
        return self._clients.place

    def __repr__(self) -> str:
        return f"<RedisStore {self.place} prefix={self.key_prefix!r}>"

    # --- connections ------------------------------------------------------------------

    def _sync_client(self) -> SyncClient[bytes]:
        return self._clients.sync()

    def _do(self, work: Callable[[SyncClient[bytes]], T]) -> T:
        return self._clients.do(work)

    async def _ado(self, work: Callable[[AsyncClient[bytes]], Awaitable[T]]) -> T:
        return await self._clients.ado(work)

    def _marker(self) -> builtins.list[str]:
        """The KEYS entry that makes a retried add, claim or completion do nothing twice; none without retries."""
        if not self._replay_ms:
            return []
        return [self.keys.replay(self._replay_ms, uuid.uuid4().hex)]

    def maxmemory_policy(self) -> str | None:
        """The server's `maxmemory-policy`; None when the store's user may not run `CONFIG GET`.

        Raises `STORE_UNAVAILABLE` when Redis cannot be reached.
        """
        return self._clients.maxmemory_policy()

    def close(self) -> None:
        self._clients.close()

    async def aclose(self) -> None:
        await self._clients.aclose()

    # --- adding -------------------------------------------------------------------------

    def _plan_add(self, items: Sequence[NewItem], now: datetime, bound: int | str | None) -> _AddPlan:
        for new in items:
            check_new_item(new)
        if len({new.id for new in items}) != len(items):
            raise QueueError(Code.INVALID, "an item id is given twice in the batch")
        now_us = to_micros(now)
        args: builtins.list[scripts.Arg] = [
            self.keys.prefix,
            LAYOUT_VERSION,
            "" if bound is None else str(bound),
            str(len(items)),
        ]
        added, shapes = [], []
        keys = [self.keys.schema, self.keys.seq, self.keys.items, self.keys.queues, *self._marker(), *self.keys.indexes]
        keys += self._quota_key(bound)
        kinds: dict[tuple[str, str], None] = {}  # the items' (queue, domains): their index keys named once
        for new in items:
            item = as_added(new, now, now_us)
            shape = _shape(item)
            values = item_args(new, item, now_us, shape)
            args += values
            added.append(item)
            shapes.append(shape)
            item_id = str(values[0])  # the id as text once (`uuid.UUID.__str__` is slow)
            keys += [self.keys.item(item_id), self.keys.message(item_id)]
            kinds[shape[0], shape[1]] = None
        shared = [name for queue, item_domains in kinds for name in self.keys.of_shape(queue, item_domains)]
        keys += dict.fromkeys(shared)  # each item's keys, and the fixed ones, are distinct already
        return _AddPlan(tuple(keys), tuple(args), tuple(added), tuple(shapes))

    def _added(self, plan: _AddPlan, reply: Any) -> builtins.list[QueueItem]:
        outcome = [text(part) for part in reply]
        if outcome[0] == "full":
            raise QueueError(Code.FULL, f"the queue holds {outcome[1]} items; MAX_ITEMS is {self.max_items}")
        if outcome[0] == "duplicate":
            raise QueueError(Code.INVALID, f"an item with id {outcome[1]} is queued already")
        if outcome[0] == "schema":
            self._clients.ready = False
            raise self._clients.foreign(outcome[1])
        for item, shape in zip(plan.added, plan.shapes, strict=True):
            self._shapes.add(item.id, shape)
        return list(plan.added)

    def add_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        return self._add_many(items, now, self.max_items)

    def _add_many(self, items: Sequence[NewItem], now: datetime, bound: int | str | None) -> builtins.list[QueueItem]:
        """`add_many` with the items this store's keys may hold at most (a partition's share: `M:N:p`)."""
        plan = self._plan_add(items, now, bound)
        if not plan.added:
            return []
        if self.on_commit:
            from django.db import transaction

            if transaction.get_connection().in_atomic_block:
                transaction.on_commit(functools.partial(self._add_committed, plan), robust=True)
                return list(plan.added)
        return self._do(lambda client: self._added(plan, scripts.ADD.run(client, plan.keys, plan.args, self.wait)))

    def _add_committed(self, plan: _AddPlan) -> None:
        try:
            self._do(lambda client: self._added(plan, scripts.ADD.run(client, plan.keys, plan.args, self.wait)))
        except QueueError as exc:
            logger.error(
                "%d item(s) were not queued after their transaction committed (%s): %s",
                len(plan.added),
                ", ".join(str(item.id) for item in plan.added),
                exc,
            )

    async def aadd_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        return await self._aadd_many(items, now, self.max_items)

    async def _aadd_many(
        self, items: Sequence[NewItem], now: datetime, bound: int | str | None
    ) -> builtins.list[QueueItem]:
        # Always at once: the worker's adds (DSNs) belong to no database transaction.
        plan = self._plan_add(items, now, bound)
        if not plan.added:
            return []

        async def work(client: AsyncClient[bytes]) -> builtins.list[QueueItem]:
            return self._added(plan, await scripts.ADD.arun(client, plan.keys, plan.args, self.wait))

        return await self._ado(work)

    # --- renewing (claiming: redis_claiming.py) -------------------------------------------

    def _renew_args(self, ids: Sequence[uuid.UUID], owner: str, lease_expires: datetime) -> builtins.list[scripts.Arg]:
        check_owner(owner)
        return [self.keys.prefix, owner, str(to_micros(lease_expires)), *(str(uuid.UUID(str(i))) for i in ids)]

    def _renew_keys(self, ids: Sequence[uuid.UUID]) -> builtins.list[str]:
        """`leases`, then each item's key: every key renew.lua touches is declared."""
        return [self.keys.leases, *(self.keys.item(uuid.UUID(str(i))) for i in ids)]

    @staticmethod
    def _renewed(ids: Sequence[uuid.UUID], reply: Any) -> builtins.list[uuid.UUID]:
        held = {text(raw) for raw in reply}
        return [item_id for item_id in ids if str(item_id) in held]

    def renew(self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime) -> builtins.list[uuid.UUID]:
        args = self._renew_args(ids, owner, lease_expires)
        if not ids:
            return []
        keys = self._renew_keys(ids)
        return self._do(lambda client: self._renewed(ids, scripts.RENEW.run(client, keys, args, self.wait)))

    async def arenew(
        self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime
    ) -> builtins.list[uuid.UUID]:
        args = self._renew_args(ids, owner, lease_expires)
        if not ids:
            return []
        keys = self._renew_keys(ids)

        async def work(client: AsyncClient[bytes]) -> builtins.list[uuid.UUID]:
            return self._renewed(ids, await scripts.RENEW.arun(client, keys, args, self.wait))

        return await self._ado(work)

    # --- completing ---------------------------------------------------------------------

    def _as_claimed(
        self, item_id: uuid.UUID, owner: str, revision: int
    ) -> tuple[QueueItem, tuple[str, str, str]] | None:
        """The item as this store's claim left it for `owner` at `revision`, and its shape; None: read it."""
        before = self._claimed.take(item_id, owner, revision)
        shape = self._shapes.get(item_id) if before is not None else None
        return None if before is None or shape is None else (before, shape)

    def _read_before(
        self, item_id: uuid.UUID, owner: str, revision: int, raw: Any
    ) -> tuple[QueueItem, tuple[str, str, str]] | None:
        """The item and its shape from its hash as read (LEASE_LOST unless `owner` holds it at `revision`); None
        when it is gone."""
        if not raw:
            self._shapes.forget(item_id)
            return None
        found = fields(raw)
        before = item_of(found)
        if before.owner != owner or before.revision != revision:
            raise _lease_lost(item_id, owner)
        return before, self._shapes.note(item_id, found)

    def _complete_item(
        self, request: CompleteRequest, before: QueueItem, shape: tuple[str, str, str]
    ) -> tuple[QueueItem, builtins.list[str], builtins.list[scripts.Arg]]:
        """The item after the completion, and its keys and values in complete.lua's call."""
        item_id, completion = request.item_id, request.completion
        after = apply_completion(before, completion)
        keys = self.keys.of_item(item_id, shape)
        args: builtins.list[scripts.Arg] = [str(item_id), request.owner, str(request.revision)]
        failed_at = ""
        if after.done and not after.kept:
            args += ["drop", "", "", "", ""]
            self._shapes.forget(item_id)
        else:
            args += [
                "keep" if after.kept else "record",
                dump_recipients(after.recipients),
                str(to_micros(after.next_attempt)),
                str(after.attempts),
                "1" if after.delay_warned else "0",
            ]
            failed_at = str(to_micros(after.failed_at)) if after.failed_at is not None else ""
        args += [failed_at, str(len(completion.dsns))]
        if completion.dsns:
            assert completion.now is not None  # check_completion
            now_us = to_micros(completion.now)
            for dsn in completion.dsns:
                added = as_added(dsn, completion.now, now_us)
                dsn_shape = _shape(added)
                args += item_args(dsn, added, now_us, dsn_shape)
                keys += self.keys.of_item(dsn.id, dsn_shape)
        args += suppression_args(completion.suppress)
        return after, keys, args

    def _complete_call(
        self, items: Sequence[tuple[builtins.list[str], builtins.list[scripts.Arg]]], bound: int | str | None
    ) -> scripts.Call:
        """complete.lua's keys and arguments for the items' keys and values (`_complete_item`)."""
        keys = self._complete_keys() + self._quota_key(bound)
        args: builtins.list[scripts.Arg] = [self.keys.prefix, "" if bound is None else str(bound), str(len(items))]
        for item_keys, item_values in items:
            keys += item_keys
            args += item_values
        return builtins.list(dict.fromkeys(keys)), args

    def _completed(self, item_id: uuid.UUID, owner: str, after: QueueItem, reply: Any) -> QueueItem | None:
        if reply == -1:
            self._shapes.forget(item_id)
            return None
        if reply == 0:
            raise _lease_lost(item_id, owner)
        if reply == -2:
            raise QueueError(Code.FULL, f"no room for the DSNs of {item_id}: MAX_ITEMS is {self.max_items}")
        if reply == -3:
            raise QueueError(Code.INVALID, f"a DSN of {item_id} has the id of an item queued already")
        return after

    def _quota_key(self, bound: int | str | None) -> builtins.list[str]:
        """The partition's share key, declared when the bound is a partition's share (`M:N:p`, lua/quota.lua)."""
        return [self.keys.quota] if isinstance(bound, str) else []

    def _complete_keys(self) -> builtins.list[str]:
        keys = self.keys
        return [
            keys.leases,
            keys.items,
            keys.queues,
            keys.seq,
            keys.suppressed,
            keys.suppressed_by_time,
            *self._marker(),
            *keys.indexes,
        ]

    # A completion of an item this store claimed is one round trip: the script, made from the item as claimed
    # (complete.lua checks owner and revision). Otherwise it is two, each retried on its own: the read, then the
    # script. The script carries a marker, so that one retried after a lost answer finds it ran and answers as it did.

    def complete(self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion) -> QueueItem | None:
        return self._complete(item_id, owner, revision, completion, self.max_items)

    def _complete(
        self, item_id: uuid.UUID, owner: str, revision: int, completion: Completion, bound: int | str | None
    ) -> QueueItem | None:
        """`complete`, its DSNs bounded by `bound` (a partition's share: `M:N:p`)."""
        check_owner(owner)
        check_completion(completion)
        known = self._as_claimed(item_id, owner, revision)
        if known is None:
            known = self._read_before(
                item_id, owner, revision, self._do(lambda client: _hgetall(client, self.keys.item(item_id)))
            )
            if known is None:
                return None
        request = CompleteRequest(item_id, owner, revision, completion)
        after, item_keys, item_values = self._complete_item(request, *known)
        keys, args = self._complete_call([(item_keys, item_values)], bound)
        (reply,) = self._do(lambda client: scripts.COMPLETE.run(client, keys, args, self.wait))
        return self._completed(item_id, owner, after, reply)

    async def acomplete(
        self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion
    ) -> QueueItem | None:
        return await self._acomplete(item_id, owner, revision, completion, self.max_items)

    async def _acomplete(
        self, item_id: uuid.UUID, owner: str, revision: int, completion: Completion, bound: int | str | None
    ) -> QueueItem | None:
        (answer,) = await self._acomplete_many([CompleteRequest(item_id, owner, revision, completion)], bound)
        if isinstance(answer, QueueError):
            raise answer
        return answer

    async def acomplete_many(
        self, requests: Sequence[CompleteRequest], *, also: AlsoWrite | None = None
    ) -> builtins.list[QueueItem | None | QueueError]:
        self._refuse_also(also)
        return await self._acomplete_many(requests, self.max_items)

    async def _acomplete_many(
        self, requests: Sequence[CompleteRequest], bound: int | str | None
    ) -> builtins.list[QueueItem | None | QueueError]:
        """One round trip for the whole batch: one complete.lua call for all its items (each atomic on its own, as
        `complete`), retried as one; the items this store did not claim read first, in one more."""
        for request in requests:
            check_owner(request.owner)
            check_completion(request.completion)
        return await self._acomplete_checked(requests, bound)

    async def _acomplete_checked(
        self, requests: Sequence[CompleteRequest], bound: int | str | None
    ) -> builtins.list[QueueItem | None | QueueError]:
        """`_acomplete_many` of requests checked already (a partitioned store checks them once for its parts)."""
        if not requests:
            return []
        befores = [self._as_claimed(r.item_id, r.owner, r.revision) for r in requests]
        unknown = [index for index, known in enumerate(befores) if known is None]
        answers: builtins.list[QueueItem | None | QueueError] = [None] * len(requests)
        if unknown:

            async def read(client: AsyncClient[bytes]) -> Any:
                reading = client.pipeline(transaction=False)
                for index in unknown:
                    reading.execute_command("HGETALL", self.keys.item(requests[index].item_id))
                return await reading.execute()

            for index, raw in zip(unknown, await self._ado(read), strict=True):
                request = requests[index]
                try:
                    befores[index] = self._read_before(request.item_id, request.owner, request.revision, raw)
                except QueueError as exc:
                    answers[index] = exc
        done: builtins.list[tuple[int, QueueItem]] = []
        parts: builtins.list[tuple[builtins.list[str], builtins.list[scripts.Arg]]] = []
        for index, (request, known) in enumerate(zip(requests, befores, strict=True)):
            if known is not None and answers[index] is None:
                after, item_keys, item_values = self._complete_item(request, *known)
                done.append((index, after))
                parts.append((item_keys, item_values))
        if not parts:
            return answers
        call = self._complete_call(parts, bound)

        async def write(client: AsyncClient[bytes]) -> Any:
            return (await scripts.arun_many(client, scripts.COMPLETE, [call], self.wait))[0]

        replies = await self._ado(write)
        if isinstance(replies, Exception):
            raise self._clients.translate(replies)
        for (index, after), reply in zip(done, replies, strict=True):
            request = requests[index]
            try:
                answers[index] = self._completed(request.item_id, request.owner, after, reply)
            except QueueError as exc:
                answers[index] = exc
        return answers

    # --- rescheduling, cancelling ----------------------------------------------------------

    def _reschedule_args(self, item_id: uuid.UUID, at: datetime, owner: str | None) -> builtins.list[scripts.Arg]:
        if owner is not None:
            check_owner(owner)
        return [self.keys.prefix, str(item_id), str(to_micros(at)), owner or ""]

    def _with_item(self, item_id: uuid.UUID, head: builtins.list[str], shape: builtins.list[Any]) -> builtins.list[str]:
        """`head`, then the item's keys by its shape (queue, domains, words; as read or known): [] when it is gone."""
        if shape[0] is None:
            return []
        known = (text(shape[0]), text(shape[1] or b""), text(shape[2] or b""))
        self._shapes.add(item_id, known)
        item_keys = self.keys.of_item(item_id, known)
        return builtins.list(dict.fromkeys([*head, *self.keys.indexes, *item_keys]))

    def _item_keys(self, client: SyncClient[bytes], item_id: uuid.UUID, head: builtins.list[str]) -> builtins.list[str]:
        """The keys a script writing the item declares (its queue and domains known, or read first)."""
        shape = self._shapes.get(item_id) or client.execute_command("HMGET", self.keys.item(item_id), *SHAPE)
        return self._with_item(item_id, head, builtins.list(shape))

    async def _aitem_keys(
        self, client: AsyncClient[bytes], item_id: uuid.UUID, head: builtins.list[str]
    ) -> builtins.list[str]:
        shape = self._shapes.get(item_id) or await client.execute_command(  # type: ignore[no-untyped-call]
            "HMGET", self.keys.item(item_id), *SHAPE
        )
        return self._with_item(item_id, head, builtins.list(shape))

    def reschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        args = self._reschedule_args(item_id, at, owner)
        head = [self.keys.leases, self.keys.items, self.keys.queues]

        def work(client: SyncClient[bytes]) -> bool:
            keys = self._item_keys(client, item_id, head)
            return bool(keys) and scripts.RESCHEDULE.run(client, keys, args, self.wait) == 1

        return self._do(work)

    async def areschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        args = self._reschedule_args(item_id, at, owner)
        head = [self.keys.leases, self.keys.items, self.keys.queues]

        async def work(client: AsyncClient[bytes]) -> bool:
            keys = await self._aitem_keys(client, item_id, head)
            return bool(keys) and await scripts.RESCHEDULE.arun(client, keys, args, self.wait) == 1

        return await self._ado(work)

    def _cancel_keys(self, item_id: uuid.UUID, keys: builtins.list[str]) -> builtins.list[str]:
        """A gone item's own keys still: its message may be left (cancel.lua drops it)."""
        self._shapes.forget(item_id)
        return keys or [self.keys.leases, self.keys.items, self.keys.item(item_id), self.keys.message(item_id)]

    def cancel(self, item_id: uuid.UUID) -> QueueItem | None:
        args = [self.keys.prefix, str(item_id)]

        def work(client: SyncClient[bytes]) -> QueueItem | None:
            keys = self._cancel_keys(item_id, self._item_keys(client, item_id, [self.keys.leases, self.keys.items]))
            return to_item_or_none(scripts.CANCEL.run(client, keys, args, self.wait))

        return self._do(work)

    async def acancel(self, item_id: uuid.UUID) -> QueueItem | None:
        args: builtins.list[scripts.Arg] = [self.keys.prefix, str(item_id)]

        async def work(client: AsyncClient[bytes]) -> QueueItem | None:
            found = await self._aitem_keys(client, item_id, [self.keys.leases, self.keys.items])
            return to_item_or_none(
                await scripts.CANCEL.arun(client, self._cancel_keys(item_id, found), args, self.wait)
            )

        return await self._ado(work)

    # --- waking idle workers -----------------------------------------------------------------

    async def await_added(self, timeout: float) -> bool:
        """Wait for an add's message on `<prefix>wakeup`; True once one came (see `RedisClients.await_added`)."""
        return await self._clients.await_added(timeout)


def _shape(item: QueueItem) -> tuple[str, str, str]:
    """A new item's queue, domains and words, as its hash will keep them."""
    return item.queue, domains(item.recipients), words(item.subject)


def _partitions(options: Mapping[str, Any] | None) -> int:
    """How many parts the queue is split into: `partitions` on a Cluster, else 1."""
    found = (options or {}).get("partitions", 1) if (options or {}).get("cluster") else 1
    return found if isinstance(found, int) and not isinstance(found, bool) and found > 0 else 1


def _lease_lost(item_id: uuid.UUID, owner: str) -> QueueError:
    return QueueError(Code.LEASE_LOST, f"the lease on {item_id} is no longer held by {owner}", item_id=item_id)
