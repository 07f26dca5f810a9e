"""`manage.py mailqueue_search_index`: on the Redis store, index the items queued before the search had indexes."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...core.errors import QueueError
from ...stores import get_store
from ...stores.redis_reading import RedisReading


class Command(BaseCommand):
    help = (
        "Redis store: put the items queued before the search had its present indexes into them (words, addrs), then "
        "mark the indexes whole; until then the admin's search reads every item. Other stores: nothing to do."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        store = get_store()
        if not isinstance(store, RedisReading):
            self.stdout.write("mailqueue: this store's search needs no index built (nothing to do)")
            return
        try:
            done = store.build_search_index()
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"mailqueue: {done} items indexed for the search")
