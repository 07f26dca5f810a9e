"""What a store's claims returned, kept by item id until the item's completion (at most `MOST`, the oldest
forgotten first): a completion made from it needs no read of the item first."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from typing import Generic, TypeVar

V = TypeVar("V")


class Kept(Generic[V]):
    """A bounded, thread-safe map from item id to what the claim returned; `pop` forgets as it answers."""

    MOST = 10_000

    def __init__(self) -> None:
        self._values: dict[uuid.UUID, V] = {}
        self._lock = threading.Lock()

    def put(self, pairs: Iterable[tuple[uuid.UUID, V]]) -> None:
        with self._lock:
            values = self._values
            values.update(pairs)
            for _ in range(len(values) - self.MOST):  # the oldest first
                del values[next(iter(values))]

    def pop(self, item_ids: Iterable[uuid.UUID]) -> list[V | None]:
        with self._lock:
            return [self._values.pop(item_id, None) for item_id in item_ids]
