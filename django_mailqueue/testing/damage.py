"""Damage for tests, done to a store's data from outside: what a real store might suffer."""

from __future__ import annotations

import uuid

from ..stores.base import QueueStore


def lose_message(store: QueueStore, item_id: uuid.UUID) -> None:
    """Drop an item's message but keep the item (the worker then fails it with 5.3.0).

    Knows the three stores of the package; raises `NotImplementedError` for any other.
    """
    from ..stores.memory import MemoryStore
    from ..stores.orm import OrmStore

    if isinstance(store, MemoryStore):
        with store._lock:
            store._messages.pop(item_id, None)
        return
    if isinstance(store, OrmStore):
        from ..models import QueuedMessage

        QueuedMessage.objects.using(store.alias).filter(item__id=item_id).delete()
        return
    if type(store).__name__ in ("RedisStore", "PartitionedRedisStore"):  # redis-py may not be installed
        from ..stores.redis import RedisStore
        from ..stores.redis_partitions import PartitionedRedisStore

        assert isinstance(store, RedisStore)
        part = (store.part_of(item_id) or store) if isinstance(store, PartitionedRedisStore) else store
        key = part.keys.message(item_id)
        part._do(lambda client: client.execute_command("DEL", key))
        return
    raise NotImplementedError(f"{type(store).__name__} cannot be made to lose a message")
