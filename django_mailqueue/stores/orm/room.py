"""The ORM store's `max_items` bound: adders count under one lock row, so concurrent adders never pass it together."""

from __future__ import annotations

from django.db.models import F

from ...core.errors import Code, QueueError
from ...models import QueuedItem, QueueLock

#: The name of the lock row adders count under.
ADD_LOCK = "add"


def make_lock_row(alias: str) -> None:
    """The lock row `check_room` counts under; the store makes it in a transaction of its own before the first
    bounded add: on MySQL and MariaDB, adders making it inside their add transactions deadlock on the shared
    locks their duplicate inserts take."""
    QueueLock.objects.using(alias).bulk_create([QueueLock(name=ADD_LOCK)], ignore_conflicts=True)


def check_room(alias: str, max_items: int, adding: int) -> None:
    """Count under a lock row, so concurrent adders never pass `max_items` together: FULL when `adding` items
    would. Runs in the add's transaction."""
    locks = QueueLock.objects.using(alias)
    if not locks.filter(name=ADD_LOCK).update(counter=F("counter") + 1):
        locks.bulk_create([QueueLock(name=ADD_LOCK)], ignore_conflicts=True)
        locks.filter(name=ADD_LOCK).update(counter=F("counter") + 1)
    held = QueuedItem.objects.using(alias).order_by()[: max_items + 1].count()  # at most the bound
    if held + adding > max_items:
        raise QueueError(Code.FULL, f"the queue holds {held} items; MAX_ITEMS is {max_items}")


def no_room(alias: str, max_items: int | None, adding: int) -> QueueError | None:
    """FULL when `adding` DSNs would take the queue past `max_items` (the requests carrying them then record
    nothing); None when they fit, or there is no bound."""
    if max_items is None or not adding:
        return None
    try:
        check_room(alias, max_items, adding)
    except QueueError as exc:
        return exc
    return None
