"""The Redis store's kept failed items (`KEEP_FAILED`): read first, then sent again or pruned by failed.lua."""

from __future__ import annotations

import abc
import builtins
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from ..core.clock import to_micros
from ..core.items import QueueItem, sent_again
from . import redis_scripts as scripts
from .base import QueueStore
from .inputs import check_aware
from .redis_clients import SyncClient, T
from .redis_layout import Keys, domains, dump_recipients, text, to_item_or_none

#: Kept items a prune drops per script call (each call holds Redis for its own drops only).
PRUNE_BATCH = 1000


class RedisFailed(QueueStore):
    """The kept failed items' methods of `RedisStore` (see docs/redis.md, "The keys")."""

    keys: Keys
    #: WAIT after a write (`sync_replicas`), as the store's other scripts
    wait: scripts.Wait | None

    @abc.abstractmethod
    def _do(self, work: Callable[[SyncClient[bytes]], T]) -> T: ...

    def _failed_keys(self) -> builtins.list[str]:
        return [self.keys.failed, self.keys.items, self.keys.queues, *self.keys.indexes]

    def send_again(self, item_ids: Sequence[uuid.UUID], *, now: datetime) -> builtins.list[QueueItem | None]:
        """Two round trips: the items read in one pipeline, then one script for those kept failed, their keys
        declared — each written only while still kept at the revision read."""
        check_aware(now, "now")
        ids = builtins.list(dict.fromkeys(item_ids))

        kept = [item for item in (self._sent_again_read(ids) if ids else []) if item is not None and item.kept]
        if not kept:
            return [None for _ in item_ids]
        again = [sent_again(item, now) for item in kept]
        args: builtins.list[scripts.Arg] = [self.keys.prefix, "again", str(to_micros(now))]
        keys = self._failed_keys()
        for before, after in zip(kept, again, strict=True):
            args += [str(before.id), str(before.revision), dump_recipients(after.recipients)]
            keys += self.keys.of_item(before.id, (before.queue, domains(before.recipients), ""))
        keys = builtins.list(dict.fromkeys(keys))
        done = self._do(lambda client: scripts.FAILED.run(client, keys, args, self.wait))
        found = {after.id: after for after, wrote in zip(again, done, strict=True) if int(wrote) == 1}
        return [found.get(item_id) for item_id in item_ids]

    def _sent_again_read(self, ids: Sequence[uuid.UUID]) -> builtins.list[QueueItem | None]:
        def read(client: SyncClient[bytes]) -> builtins.list[QueueItem | None]:
            pipe = client.pipeline(transaction=False)
            for item_id in ids:
                pipe.execute_command("HGETALL", self.keys.item(item_id))  # type: ignore[no-untyped-call]
            return [to_item_or_none(raw) for raw in pipe.execute()]

        return self._do(read)

    def prune_failed(self, *, before: datetime) -> int:
        """Per batch three round trips: the kept items failed before `before` (`failed`), their queues and domains,
        then failed.lua with their keys declared, which drops those still kept failed before then."""
        check_aware(before, "before")
        until = str(to_micros(before))
        pruned = 0
        while True:
            members, shapes = self._do(lambda client: self._prunable(client, until))
            if not members:
                return pruned
            args: builtins.list[scripts.Arg] = [self.keys.prefix, "prune", until, *members]
            keys = self._failed_keys()
            for member, (queue, held) in zip(members, shapes, strict=True):
                item_id = text(member)[17:]
                keys += [self.keys.item(item_id), self.keys.message(item_id)]
                if queue is not None:
                    keys += self.keys.of_shape(text(queue), text(held or b""))
            keys = builtins.list(dict.fromkeys(keys))
            pruned += int(self._do(self._prune(keys, args)))
            if len(members) < PRUNE_BATCH:
                return pruned

    def _prune(self, keys: Sequence[str], args: Sequence[scripts.Arg]) -> Callable[[SyncClient[bytes]], Any]:
        return lambda client: scripts.FAILED.run(client, keys, args, self.wait)

    def _prunable(self, client: SyncClient[bytes], until: str) -> tuple[builtins.list[bytes], builtins.list[Any]]:
        """The first `PRUNE_BATCH` members of `failed` before `until`, and each one's queue and domains."""
        members = client.execute_command(  # type: ignore[no-untyped-call, unused-ignore]
            "ZRANGE", self.keys.failed, "-inf", f"({until}", "BYSCORE", "LIMIT", 0, PRUNE_BATCH
        )
        if not members:
            return [], []
        pipe = client.pipeline(transaction=False)
        for member in members:
            pipe.execute_command("HMGET", self.keys.item(text(member)[17:]), "queue", "domains")  # type: ignore[no-untyped-call]
        return builtins.list(members), pipe.execute()
