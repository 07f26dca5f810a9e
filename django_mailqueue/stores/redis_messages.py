"""The Redis store's reads of one item: its hash, and its message byte for byte (in slices past `READ_CHUNK`)."""

from __future__ import annotations

import abc
import io
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ..core.items import QueueItem
from .base import READ_CHUNK, QueueStore
from .redis_clients import AsyncClient, SyncClient
from .redis_layout import Keys, bytes_or_none, to_item_or_none

_R = TypeVar("_R")


class RedisMessages(QueueStore):
    """`get`, `read_message` and their twins and batches, for `RedisStore`."""

    keys: Keys

    @abc.abstractmethod
    def _do(self, work: Callable[[SyncClient[bytes]], _R]) -> _R: ...

    @abc.abstractmethod
    async def _ado(self, work: Callable[[AsyncClient[bytes]], Awaitable[_R]]) -> _R: ...

    def get(self, item_id: uuid.UUID) -> QueueItem | None:
        return self._do(lambda client: to_item_or_none(_hgetall(client, self.keys.item(item_id))))

    async def aget(self, item_id: uuid.UUID) -> QueueItem | None:
        async def work(client: AsyncClient[bytes]) -> QueueItem | None:
            return to_item_or_none(await _ahgetall(client, self.keys.item(item_id)))

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
                return bytes_or_none(client.execute_command("GET", key))
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
                return bytes_or_none(await client.execute_command("GET", key))  # type: ignore[no-untyped-call]
            message = io.BytesIO()
            for start in range(0, size, READ_CHUNK):
                part = await client.execute_command("GETRANGE", key, start, start + READ_CHUNK - 1)  # type: ignore[no-untyped-call]
                if len(part) != min(READ_CHUNK, size - start):
                    return None  # done (or cancelled) and dropped meanwhile
                message.write(part)
            return message.getvalue()

        return await self._ado(work)


def _hgetall(client: SyncClient[bytes], key: str) -> Any:
    return client.execute_command("HGETALL", key)


async def _ahgetall(client: AsyncClient[bytes], key: str) -> Any:
    return await client.execute_command("HGETALL", key)  # type: ignore[no-untyped-call]
