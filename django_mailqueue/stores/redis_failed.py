"""The Redis store's kept failed items (`KEEP_FAILED`): sent again and pruned by failed.lua, found by `failed`."""

from __future__ import annotations

import abc
import builtins
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime

from ..core.clock import to_micros
from ..core.items import QueueItem, sent_again
from . import redis_scripts as scripts
from .base import QueueStore
from .inputs import check_aware
from .redis_clients import SyncClient, T
from .redis_layout import Keys, dump_recipients, to_item_or_none

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
        return [self.keys.failed, self.keys.items, self.keys.queues]

    def send_again(self, item_ids: Sequence[uuid.UUID], *, now: datetime) -> builtins.list[QueueItem | None]:
        """Two round trips: the items read in one pipeline, then one script for those kept failed — each written
        only while still kept at the revision read."""
        check_aware(now, "now")
        ids = builtins.list(dict.fromkeys(item_ids))

        def read(client: SyncClient[bytes]) -> builtins.list[QueueItem | None]:
            pipe = client.pipeline(transaction=False)
            for item_id in ids:
                pipe.execute_command("HGETALL", self.keys.item(item_id))  # type: ignore[no-untyped-call]
            return [to_item_or_none(raw) for raw in pipe.execute()]

        kept = [item for item in (self._do(read) if ids else []) if item is not None and item.kept]
        if not kept:
            return [None for _ in item_ids]
        again = [sent_again(item, now) for item in kept]
        args: builtins.list[scripts.Arg] = [self.keys.prefix, "again", str(to_micros(now))]
        for before, after in zip(kept, again, strict=True):
            args += [str(before.id), str(before.revision), dump_recipients(after.recipients)]
        keys = self._failed_keys()
        done = self._do(lambda client: scripts.FAILED.run(client, keys, args, self.wait))
        found = {after.id: after for after, wrote in zip(again, done, strict=True) if int(wrote) == 1}
        return [found.get(item_id) for item_id in item_ids]

    def prune_failed(self, *, before: datetime) -> int:
        check_aware(before, "before")
        args: builtins.list[scripts.Arg] = [self.keys.prefix, "prune", str(to_micros(before)), str(PRUNE_BATCH)]
        keys = self._failed_keys()
        pruned = 0
        while True:
            gone = int(self._do(lambda client: scripts.FAILED.run(client, keys, args, self.wait)))
            pruned += gone
            if gone < PRUNE_BATCH:
                return pruned
