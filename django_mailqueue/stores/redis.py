"""`RedisStore`: the contract on one Redis (or a primary with replicas), one Lua script per write."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import io
import json
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.client

from ..core.clock import from_micros, to_micros
from ..core.errors import Code, QueueError
from ..core.items import (
    CompleteRequest,
    Completion,
    ItemQuery,
    NewItem,
    QueueItem,
    Recipient,
    RecipientState,
    Reply,
    apply_completion,
    matches,
)
from ..core.masking import SecretMask
from . import redis_connection as conn
from . import redis_scripts as scripts
from .base import READ_CHUNK, QueueStore, check_completion, check_new_item, check_owner

logger = logging.getLogger("django_mailqueue.stores.redis")

#: What `<prefix>schema` holds: the layout of the keys below, version 1.
LAYOUT_VERSION = "django-mailqueue:1"
#: Items `list` and `count` read per script call when they filter.
SCAN_PAGE = 500

T = TypeVar("T")
SyncClient = redis.Redis  # the generic parameters are the stubs' only
AsyncClient = redis.asyncio.Redis


@dataclass(frozen=True)
class Keys:
    """The names of a queue's keys under its prefix (see docs/redis.md)."""

    prefix: str

    @property
    def schema(self) -> str:
        return f"{self.prefix}schema"

    @property
    def seq(self) -> str:
        return f"{self.prefix}seq"

    @property
    def items(self) -> str:
        return f"{self.prefix}items"

    @property
    def leases(self) -> str:
        return f"{self.prefix}leases"

    @property
    def queues(self) -> str:
        return f"{self.prefix}queues"

    @property
    def wakeup(self) -> str:
        """The pub/sub channel an add publishes to."""
        return f"{self.prefix}wakeup"

    def item(self, item_id: uuid.UUID | str) -> str:
        return f"{self.prefix}item:{item_id}"

    def message(self, item_id: uuid.UUID | str) -> str:
        return f"{self.prefix}message:{item_id}"

    def ready(self, queue: str) -> str:
        return f"{self.prefix}ready:{queue}"


@dataclass(frozen=True)
class _AddPlan:
    keys: tuple[str, ...]
    args: tuple[scripts.Arg, ...]
    added: tuple[QueueItem, ...]


class RedisStore(QueueStore):
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

    def __init__(self, options: Mapping[str, Any] | None = None, *, max_items: int | None = None) -> None:
        super().__init__(options, max_items=max_items)
        self.key_prefix: str = self.options.get("key_prefix", conn.DEFAULT_PREFIX)
        self.keys = Keys(self.key_prefix)
        self.on_commit: bool = bool(self.options.get("on_commit", False))
        self._timeout = float(self.options.get("socket_timeout", conn.DEFAULT_SOCKET_TIMEOUT))
        self._url: str | None = self.options.get("url")
        self._cache: str | None = self.options.get("cache")
        self._password: str | None = self.options.get("password")
        self._mask = SecretMask(self._password)
        if self._url is not None:
            self._mask = self._mask.adding(urlsplit(self._url).password)
            self.place = conn.where(self._url)
        else:
            self.place = f"the server of cache {self._cache!r}"
        self._lock = threading.Lock()
        self._client: SyncClient[bytes] | None = None
        self._owns_client = False
        self._async_settings: tuple[dict[str, Any], type[Any]] | None = None
        self._async: tuple[asyncio.AbstractEventLoop, AsyncClient[bytes]] | None = None
        self._pubsub: redis.asyncio.client.PubSub | None = None
        self._ready = False

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> builtins.list[str]:
        return conn.check_options(options)

    def __repr__(self) -> str:
        return f"<RedisStore {self.place} prefix={self.key_prefix!r}>"

    # --- connections ------------------------------------------------------------------

    def _sync_client(self) -> SyncClient[bytes]:
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._client is None:
                if self._url is not None:
                    self._client = conn.sync_client_from_url(self._url, self._timeout, self._password)
                    self._owns_client = True
                else:
                    assert self._cache is not None
                    cached = conn.cache_clients(self._cache, self._timeout)
                    self._mask = self._mask.adding(cached.password)
                    self._async_settings = (cached.async_settings, cached.async_class)
                    self._client = cached.client
                    self._owns_client = cached.owned
            return self._client

    def _async_client(self) -> AsyncClient[bytes]:
        loop = asyncio.get_running_loop()
        current = self._async
        if current is not None and current[0] is loop:
            return current[1]
        # An asyncio client belongs to the loop it connected on: a store used from a
        # new loop gets a new client (the worker's loop is one for its whole run).
        if self._url is not None:
            client = conn.async_client_from_url(self._url, self._timeout, self._password)
        else:
            if self._async_settings is None:
                self._sync_client()
            assert self._async_settings is not None
            client = conn.async_client_from_settings(*self._async_settings)
        self._async = (loop, client)
        self._pubsub = None
        return client

    def _do(self, work: Callable[[SyncClient[bytes]], T]) -> T:
        """Run `work` on the sync client: the prefix checked first, Redis's errors as `QueueError`s."""
        try:
            client = self._sync_client()
            if not self._ready:
                self._check_schema(scripts.SCHEMA.run(client, [self.keys.schema], [LAYOUT_VERSION]))
                with contextlib.suppress(redis.RedisError):
                    self._note_policy(client.execute_command("CONFIG", "GET", "maxmemory-policy"))
            return work(client)
        except QueueError:
            raise
        except (redis.RedisError, OSError) as exc:
            raise conn.translate(exc, self._mask, self.place) from None

    async def _ado(self, work: Callable[[AsyncClient[bytes]], Awaitable[T]]) -> T:
        try:
            client = self._async_client()
            if not self._ready:
                self._check_schema(await scripts.SCHEMA.arun(client, [self.keys.schema], [LAYOUT_VERSION]))
                with contextlib.suppress(redis.RedisError):
                    self._note_policy(await client.execute_command("CONFIG", "GET", "maxmemory-policy"))  # type: ignore[no-untyped-call]
            return await work(client)
        except QueueError:
            raise
        except (redis.RedisError, OSError) as exc:
            raise conn.translate(exc, self._mask, self.place) from None

    def maxmemory_policy(self) -> str | None:
        """The server's `maxmemory-policy`; None when the store's user may not run `CONFIG GET`.

        Raises `STORE_UNAVAILABLE` when Redis cannot be reached.
        """
        try:
            reply = self._sync_client().execute_command("CONFIG", "GET", "maxmemory-policy")
        except redis.exceptions.NoPermissionError:
            return None
        except (redis.RedisError, OSError) as exc:
            raise conn.translate(exc, self._mask, self.place) from None
        return _policy(reply)

    def _note_policy(self, reply: Any) -> None:
        policy = _policy(reply)
        if policy is not None and policy != "noeviction":
            logger.warning(
                "the Redis server of the queue (%s) runs with maxmemory-policy %r: when full it evicts queued "
                "items and messages; use noeviction (mailqueue.W001)",
                self.place,
                policy,
            )

    def _check_schema(self, found: Any) -> None:
        kind, value = (_text(part) for part in found)
        if kind == "string" and value == LAYOUT_VERSION:
            self._ready = True
            return
        held = f"{value[:60]!r}" if kind == "string" else f"a key of type {kind}"
        raise self._foreign(held)

    def _foreign(self, held: str) -> QueueError:
        return QueueError(
            Code.INVALID_OPTION,
            f"key_prefix {self.key_prefix!r} on {self.place} is another application's: {self.keys.schema} holds "
            f"{held}, not this store's layout version {LAYOUT_VERSION!r}; give the store a key_prefix of its own",
        )

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
            owned, self._owns_client = self._owns_client, False
            current, self._async = self._async, None
            pubsub, self._pubsub = self._pubsub, None
        if current is not None:
            loop, aclient = current
            if not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(_close_async(aclient, pubsub))
        if client is not None and owned:
            client.close()

    async def aclose(self) -> None:
        current, self._async = self._async, None
        pubsub, self._pubsub = self._pubsub, None
        if current is not None and current[0] is asyncio.get_running_loop():
            await _close_async(current[1], pubsub)
        with self._lock:
            client, self._client = self._client, None
            owned, self._owns_client = self._owns_client, False
        if client is not None and owned:
            client.close()

    # --- adding -------------------------------------------------------------------------

    def _plan_add(self, items: Sequence[NewItem], now: datetime) -> _AddPlan:
        for new in items:
            check_new_item(new)
        if len({new.id for new in items}) != len(items):
            raise QueueError(Code.INVALID, "an item id is given twice in the batch")
        now_us = to_micros(now)
        args: builtins.list[scripts.Arg] = [
            self.key_prefix,
            LAYOUT_VERSION,
            "" if self.max_items is None else str(self.max_items),
            str(len(items)),
        ]
        added = []
        for new in items:
            item = _as_added(new, now, now_us)
            args += _item_args(new, item, now_us)
            added.append(item)
        keys = (self.keys.schema, self.keys.seq, self.keys.items, self.keys.queues)
        return _AddPlan(keys, tuple(args), tuple(added))

    def _added(self, plan: _AddPlan, reply: Any) -> builtins.list[QueueItem]:
        outcome = [_text(part) for part in reply]
        if outcome[0] == "full":
            raise QueueError(Code.FULL, f"the queue holds {outcome[1]} items; MAX_ITEMS is {self.max_items}")
        if outcome[0] == "duplicate":
            raise QueueError(Code.INVALID, f"an item with id {outcome[1]} is queued already")
        if outcome[0] == "schema":
            self._ready = False
            raise self._foreign(outcome[1])
        return list(plan.added)

    def add_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        plan = self._plan_add(items, now)
        if not plan.added:
            return []
        if self.on_commit:
            from django.db import transaction

            if transaction.get_connection().in_atomic_block:
                transaction.on_commit(functools.partial(self._add_committed, plan), robust=True)
                return list(plan.added)
        return self._do(lambda client: self._added(plan, scripts.ADD.run(client, plan.keys, plan.args)))

    def _add_committed(self, plan: _AddPlan) -> None:
        try:
            self._do(lambda client: self._added(plan, scripts.ADD.run(client, plan.keys, plan.args)))
        except QueueError as exc:
            logger.error(
                "%d item(s) were not queued after their transaction committed (%s): %s",
                len(plan.added),
                ", ".join(str(item.id) for item in plan.added),
                exc,
            )

    async def aadd_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        # Always at once: the worker's adds (DSNs) belong to no database transaction.
        plan = self._plan_add(items, now)
        if not plan.added:
            return []

        async def work(client: AsyncClient[bytes]) -> builtins.list[QueueItem]:
            return self._added(plan, await scripts.ADD.arun(client, plan.keys, plan.args))

        return await self._ado(work)

    # --- claiming, renewing --------------------------------------------------------------

    def _claim_args(
        self, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None, limit: int
    ) -> tuple[builtins.list[str], builtins.list[scripts.Arg]] | None:
        check_owner(owner)
        if limit < 1 or (queues is not None and not queues):
            return None
        lanes = list(dict.fromkeys(queues)) if queues is not None else []
        keys = [self.keys.leases, self.keys.items, self.keys.queues]
        args: builtins.list[scripts.Arg] = [
            self.key_prefix,
            owner,
            str(to_micros(now)),
            str(to_micros(lease_expires)),
            str(limit),
            *lanes,
        ]
        return keys, args

    def claim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> builtins.list[QueueItem]:
        call = self._claim_args(owner, now, lease_expires, queues, limit)
        if call is None:
            return []
        return self._do(lambda client: [_to_item(raw) for raw in scripts.CLAIM.run(client, *call)])

    async def aclaim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> builtins.list[QueueItem]:
        call = self._claim_args(owner, now, lease_expires, queues, limit)
        if call is None:
            return []

        async def work(client: AsyncClient[bytes]) -> builtins.list[QueueItem]:
            return [_to_item(raw) for raw in await scripts.CLAIM.arun(client, *call)]

        return await self._ado(work)

    def _renew_args(self, ids: Sequence[uuid.UUID], owner: str, lease_expires: datetime) -> builtins.list[scripts.Arg]:
        check_owner(owner)
        return [self.key_prefix, owner, str(to_micros(lease_expires)), *(str(uuid.UUID(str(i))) for i in ids)]

    @staticmethod
    def _renewed(ids: Sequence[uuid.UUID], reply: Any) -> builtins.list[uuid.UUID]:
        held = {_text(raw) for raw in reply}
        return [item_id for item_id in ids if str(item_id) in held]

    def renew(self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime) -> builtins.list[uuid.UUID]:
        args = self._renew_args(ids, owner, lease_expires)
        if not ids:
            return []
        return self._do(lambda client: self._renewed(ids, scripts.RENEW.run(client, [self.keys.leases], args)))

    async def arenew(
        self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime
    ) -> builtins.list[uuid.UUID]:
        args = self._renew_args(ids, owner, lease_expires)
        if not ids:
            return []

        async def work(client: AsyncClient[bytes]) -> builtins.list[uuid.UUID]:
            return self._renewed(ids, await scripts.RENEW.arun(client, [self.keys.leases], args))

        return await self._ado(work)

    # --- completing ---------------------------------------------------------------------

    def _complete_call(
        self, item_id: uuid.UUID, owner: str, revision: int, completion: Completion, raw: Any
    ) -> tuple[QueueItem, builtins.list[scripts.Arg]] | None:
        """The item after `completion` and the script's arguments; None when the item is gone."""
        if not raw:
            return None
        before = _to_item(raw)
        if before.owner != owner or before.revision != revision:
            raise _lease_lost(item_id, owner)
        after = apply_completion(before, completion)
        args: builtins.list[scripts.Arg] = [self.key_prefix, str(item_id), owner, str(revision)]
        if after.done:
            args += ["drop", "", "", "", ""]
        else:
            args += [
                "record",
                _dump_recipients(after.recipients),
                str(to_micros(after.next_attempt)),
                str(after.attempts),
                "1" if after.delay_warned else "0",
            ]
        args += ["" if self.max_items is None else str(self.max_items), str(len(completion.dsns))]
        if completion.dsns:
            assert completion.now is not None  # check_completion
            now_us = to_micros(completion.now)
            for dsn in completion.dsns:
                args += _item_args(dsn, _as_added(dsn, completion.now, now_us), now_us)
        return after, args

    def _completed(self, item_id: uuid.UUID, owner: str, after: QueueItem, reply: Any) -> QueueItem | None:
        if reply == -1:
            return None
        if reply == 0:
            raise _lease_lost(item_id, owner)
        if reply == -2:
            raise QueueError(Code.FULL, f"no room for the DSNs of {item_id}: MAX_ITEMS is {self.max_items}")
        if reply == -3:
            raise QueueError(Code.INVALID, f"a DSN of {item_id} has the id of an item queued already")
        return after

    @property
    def _complete_keys(self) -> builtins.list[str]:
        return [self.keys.leases, self.keys.items, self.keys.queues, self.keys.seq]

    def complete(self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion) -> QueueItem | None:
        check_owner(owner)
        check_completion(completion)
        keys = self._complete_keys

        def work(client: SyncClient[bytes]) -> QueueItem | None:
            call = self._complete_call(item_id, owner, revision, completion, _hgetall(client, self.keys.item(item_id)))
            if call is None:
                return None
            after, args = call
            return self._completed(item_id, owner, after, scripts.COMPLETE.run(client, keys, args))

        return self._do(work)

    async def acomplete(
        self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion
    ) -> QueueItem | None:
        check_owner(owner)
        check_completion(completion)
        keys = self._complete_keys

        async def work(client: AsyncClient[bytes]) -> QueueItem | None:
            raw = await _ahgetall(client, self.keys.item(item_id))
            call = self._complete_call(item_id, owner, revision, completion, raw)
            if call is None:
                return None
            after, args = call
            return self._completed(item_id, owner, after, await scripts.COMPLETE.arun(client, keys, args))

        return await self._ado(work)

    async def acomplete_many(self, requests: Sequence[CompleteRequest]) -> builtins.list[QueueItem | None | QueueError]:
        """Two round trips for the whole batch: the items read in one pipeline, then each
        item's COMPLETE script (atomic on its own, as `complete`) in another."""
        for request in requests:
            check_owner(request.owner)
            check_completion(request.completion)
        if not requests:
            return []
        keys = self._complete_keys

        async def work(client: AsyncClient[bytes]) -> builtins.list[QueueItem | None | QueueError]:
            reading = client.pipeline(transaction=False)
            for request in requests:
                reading.execute_command("HGETALL", self.keys.item(request.item_id))
            raws = await reading.execute()
            answers: builtins.list[QueueItem | None | QueueError] = []
            calls: builtins.list[tuple[int, QueueItem, builtins.list[scripts.Arg]]] = []
            for index, (request, raw) in enumerate(zip(requests, raws, strict=True)):
                try:
                    call = self._complete_call(
                        request.item_id, request.owner, request.revision, request.completion, raw
                    )
                except QueueError as exc:
                    answers.append(exc)
                    continue
                answers.append(None)
                if call is not None:
                    calls.append((index, *call))
            if not calls:
                return answers
            writing = client.pipeline(transaction=False)
            for _, _, args in calls:
                writing.execute_command("EVALSHA", scripts.COMPLETE.sha, len(keys), *keys, *args)
            replies = await writing.execute(raise_on_error=False)
            for (index, after, args), reply in zip(calls, replies, strict=True):
                if isinstance(reply, redis.exceptions.NoScriptError):
                    reply = await scripts.COMPLETE.arun(client, keys, args)  # Redis forgot it: EVAL
                elif isinstance(reply, Exception):
                    raise reply
                request = requests[index]
                try:
                    answers[index] = self._completed(request.item_id, request.owner, after, reply)
                except QueueError as exc:
                    answers[index] = exc
            return answers

        return await self._ado(work)

    # --- rescheduling, cancelling ----------------------------------------------------------

    def _reschedule_args(self, item_id: uuid.UUID, at: datetime, owner: str | None) -> builtins.list[scripts.Arg]:
        if owner is not None:
            check_owner(owner)
        return [self.key_prefix, str(item_id), str(to_micros(at)), owner or ""]

    def reschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        args = self._reschedule_args(item_id, at, owner)
        keys = [self.keys.leases, self.keys.items, self.keys.queues]
        return self._do(lambda client: bool(scripts.RESCHEDULE.run(client, keys, args) == 1))

    async def areschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        args = self._reschedule_args(item_id, at, owner)
        keys = [self.keys.leases, self.keys.items, self.keys.queues]

        async def work(client: AsyncClient[bytes]) -> bool:
            return bool(await scripts.RESCHEDULE.arun(client, keys, args) == 1)

        return await self._ado(work)

    def cancel(self, item_id: uuid.UUID) -> QueueItem | None:
        keys = [self.keys.leases, self.keys.items]
        args = [self.key_prefix, str(item_id)]
        return self._do(lambda client: _to_item_or_none(scripts.CANCEL.run(client, keys, args)))

    async def acancel(self, item_id: uuid.UUID) -> QueueItem | None:
        keys = [self.keys.leases, self.keys.items]
        args: builtins.list[scripts.Arg] = [self.key_prefix, str(item_id)]

        async def work(client: AsyncClient[bytes]) -> QueueItem | None:
            return _to_item_or_none(await scripts.CANCEL.arun(client, keys, args))

        return await self._ado(work)

    # --- reading --------------------------------------------------------------------------

    def get(self, item_id: uuid.UUID) -> QueueItem | None:
        return self._do(lambda client: _to_item_or_none(_hgetall(client, self.keys.item(item_id))))

    async def aget(self, item_id: uuid.UUID) -> QueueItem | None:
        async def work(client: AsyncClient[bytes]) -> QueueItem | None:
            return _to_item_or_none(await _ahgetall(client, self.keys.item(item_id)))

        return await self._ado(work)

    def read_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        if not item_ids:
            return {}
        keys = [self.keys.message(item_id) for item_id in item_ids]
        found = self._do(lambda client: client.execute_command("MGET", *keys))
        return {item_id: bytes(raw) for item_id, raw in zip(item_ids, found, strict=True) if raw is not None}

    async def aread_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        if not item_ids:
            return {}
        keys = [self.keys.message(item_id) for item_id in item_ids]

        async def work(client: AsyncClient[bytes]) -> Any:
            return await client.execute_command("MGET", *keys)  # type: ignore[no-untyped-call]

        found = await self._ado(work)
        return {item_id: bytes(raw) for item_id, raw in zip(item_ids, found, strict=True) if raw is not None}

    def read_message(self, item_id: uuid.UUID) -> bytes | None:
        key = self.keys.message(item_id)

        def work(client: SyncClient[bytes]) -> bytes | None:
            size = int(client.execute_command("STRLEN", key))
            if size <= READ_CHUNK:
                return _bytes_or_none(client.execute_command("GET", key))
            message = io.BytesIO()
            for start in range(0, size, READ_CHUNK):
                part = client.execute_command("GETRANGE", key, start, start + READ_CHUNK - 1)
                if len(part) != min(READ_CHUNK, size - start):
                    return None  # done (or cancelled) and dropped meanwhile
                message.write(part)
            return message.getvalue()

        return self._do(work)

    async def aread_message(self, item_id: uuid.UUID) -> bytes | None:
        key = self.keys.message(item_id)

        async def work(client: AsyncClient[bytes]) -> bytes | None:
            size = int(await client.execute_command("STRLEN", key))  # type: ignore[no-untyped-call]
            if size <= READ_CHUNK:
                return _bytes_or_none(await client.execute_command("GET", key))  # type: ignore[no-untyped-call]
            message = io.BytesIO()
            for start in range(0, size, READ_CHUNK):
                part = await client.execute_command("GETRANGE", key, start, start + READ_CHUNK - 1)  # type: ignore[no-untyped-call]
                if len(part) != min(READ_CHUNK, size - start):
                    return None  # done (or cancelled) and dropped meanwhile
                message.write(part)
            return message.getvalue()

        return await self._ado(work)

    def _page(self, first: int, count: int) -> tuple[int, builtins.list[QueueItem]]:
        """Items at ranks `first` to `first + count - 1` of the list order, and how many there are."""
        args: builtins.list[scripts.Arg] = [self.key_prefix, str(first), str(first + count - 1)]
        total, page = self._do(lambda client: scripts.PAGE.run(client, [self.keys.items], args))
        return int(total), [_to_item(raw) for raw in page]

    def list(self, query: ItemQuery | None = None, *, offset: int = 0, limit: int = 100) -> builtins.list[QueueItem]:
        if limit <= 0:
            return []
        offset = max(offset, 0)
        if query is None:
            return self._page(offset, limit)[1]
        found: builtins.list[QueueItem] = []
        for item in self.iter_items(query):  # the items before `offset` are counted, not kept
            if offset:
                offset -= 1
                continue
            found.append(item)
            if len(found) == limit:
                break
        return found

    def count(self, query: ItemQuery | None = None) -> int:
        if query is None:
            return int(self._do(lambda client: client.execute_command("ZCARD", self.keys.items)))
        return sum(1 for page in self._pages() for item in page if matches(item, query))

    def iter_items(self, query: ItemQuery | None = None, *, batch: int = 500) -> Iterator[QueueItem]:
        """One pass over the list order, filtered here: `list` with a query scans from the first rank each call."""
        for page in self._pages(batch):
            yield from (item for item in page if query is None or matches(item, query))

    def _pages(self, size: int = SCAN_PAGE) -> Iterator[builtins.list[QueueItem]]:
        """Every item, `size` at a time, in list order: for the filters, which Redis cannot index."""
        first = 0
        while True:
            total, page = self._page(first, size)
            yield page
            first += size
            if first >= total:
                return

    # --- for tests: damage as a real store might suffer it ---------------------------------

    # --- waking idle workers -----------------------------------------------------------------

    async def await_added(self, timeout: float) -> bool:
        """Wait for an add's message on `<prefix>wakeup`; True once one came.

        The subscription is made by the first call and kept, so an add between
        two calls is not missed: the next call returns True at once. When Redis
        cannot be reached, the call sleeps out the timeout (the worker polls).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        try:
            pubsub = await self._subscription()
            woke = False
            while True:
                wait = 0.0 if woke else max(deadline - loop.time(), 0.0)
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=wait)
                if message is not None:
                    woke = True
                    continue
                if woke:
                    return True
                if loop.time() >= deadline:
                    return False
        except (redis.RedisError, OSError) as exc:
            logger.warning("waiting for adds on %s failed, polling instead: %s", self.place, self._mask(str(exc)))
            broken, self._pubsub = self._pubsub, None
            if broken is not None:
                await _quietly(broken.aclose())  # type: ignore[attr-defined, unused-ignore]
                await asyncio.sleep(0)
            await asyncio.sleep(max(deadline - loop.time(), 0.0))
            return False

    async def _subscription(self) -> redis.asyncio.client.PubSub:
        client = self._async_client()
        if self._pubsub is None:
            pubsub = client.pubsub()
            await pubsub.subscribe(self.keys.wakeup)
            self._pubsub = pubsub
        return self._pubsub


# --- how an item is kept -------------------------------------------------------------------


def _as_added(new: NewItem, now: datetime, now_us: int) -> QueueItem:
    """The item as `add` stores it, its times in whole microseconds as Redis keeps them."""
    due_us = to_micros(new.not_before) if new.not_before is not None and new.not_before > now else now_us
    return QueueItem(
        id=new.id,
        sender=new.sender,
        recipients=tuple(Recipient(a) for a in new.recipients),
        size=len(new.message),
        created=from_micros(now_us),
        next_attempt=from_micros(due_us),
        queue=new.queue,
        message_id=new.message_id,
        subject=new.subject,
    )


def _item_args(new: NewItem, item: QueueItem, now_us: int) -> builtins.list[scripts.Arg]:
    """The 10 values add.lua and complete.lua take per item they store."""
    return [
        str(new.id),
        new.queue,
        str(to_micros(item.next_attempt)),
        str(now_us),
        new.sender,
        _dump_recipients(item.recipients),
        str(item.size),
        new.message_id,
        new.subject,
        bytes(new.message),
    ]


def _dump_recipients(recipients: Sequence[Recipient]) -> str:
    """Recipients as JSON: `[address, state, [code, status, text] or null, remote MTA]` each."""
    return json.dumps(
        [
            [
                r.address,
                r.state.value,
                None if r.reply is None else [r.reply.code, r.reply.status, r.reply.text],
                r.remote_mta,
            ]
            for r in recipients
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )


def _load_recipients(text: str) -> tuple[Recipient, ...]:
    return tuple(
        Recipient(address, RecipientState(state), None if reply is None else Reply(*reply), remote)
        for address, state, reply, remote in json.loads(text)
    )


def _policy(reply: Any) -> str | None:
    """The value of a `CONFIG GET maxmemory-policy` reply (a dict, or a flat list)."""
    found = _fields(reply) if reply else {}
    return found.get("maxmemory-policy")


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


def _fields(raw: Any) -> dict[str, str]:
    if isinstance(raw, dict):
        return {_text(k): _text(v) for k, v in raw.items()}
    return {_text(raw[i]): _text(raw[i + 1]) for i in range(0, len(raw), 2)}


def _to_item(raw: Any) -> QueueItem:
    """An item from its hash, as HGETALL gives it (a dict) or a script does (a flat list)."""
    f = _fields(raw)
    return QueueItem(
        id=uuid.UUID(f["id"]),
        sender=f["sender"],
        recipients=_load_recipients(f["rcpts"]),
        size=int(f["size"]),
        created=from_micros(int(f["created"])),
        next_attempt=from_micros(int(f["next"])),
        attempts=int(f["attempts"]),
        queue=f["queue"],
        owner=f.get("owner"),
        lease_expires=from_micros(int(f["expires"])) if "expires" in f else None,
        revision=int(f["rev"]),
        reclaims=int(f["reclaims"]),
        delay_warned=f["delay"] == "1",
        message_id=f["mid"],
        subject=f["subject"],
    )


def _to_item_or_none(raw: Any) -> QueueItem | None:
    return _to_item(raw) if raw else None


def _bytes_or_none(raw: Any) -> bytes | None:
    return bytes(raw) if raw is not None else None


def _hgetall(client: SyncClient[bytes], key: str) -> Any:
    return client.execute_command("HGETALL", key)


async def _ahgetall(client: AsyncClient[bytes], key: str) -> Any:
    return await client.execute_command("HGETALL", key)  # type: ignore[no-untyped-call]


def _lease_lost(item_id: uuid.UUID, owner: str) -> QueueError:
    return QueueError(Code.LEASE_LOST, f"the lease on {item_id} is no longer held by {owner}", item_id=item_id)


async def _quietly(closing: Awaitable[Any]) -> None:
    try:
        await closing
    except (redis.RedisError, OSError):
        pass


async def _close_async(client: AsyncClient[bytes], pubsub: redis.asyncio.client.PubSub | None) -> None:
    if pubsub is not None:
        await _quietly(pubsub.aclose())  # type: ignore[attr-defined, unused-ignore]
        await asyncio.sleep(0)  # the pub/sub connection closes without waiting: let its transport go
    await _quietly(client.aclose())  # type: ignore[attr-defined, unused-ignore]
