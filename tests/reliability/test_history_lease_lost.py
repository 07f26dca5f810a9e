"""An attempt whose lease is lost before its outcome is recorded keeps its history rows, marked `lease_lost`: it
reached a server, and its rows say so without claiming the item's outcome (docs/reliability.md, "History before
the outcome"). On every store: memory and Redis (the rows written first, then marked), the ORM store on SQLite and
PostgreSQL (the rows in the completion's transaction, marked there)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.db import connections

from django_mailqueue.core.clock import FakeClock
from django_mailqueue.core.items import CompleteRequest, NewItem
from django_mailqueue.delivery import AttemptResult
from django_mailqueue.history import History
from django_mailqueue.models import DeliveryRecord
from django_mailqueue.stores.base import AlsoWrite, QueueStore
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.fakes import ScriptedDeliverer
from django_mailqueue.worker import Worker
from tests.reliability.test_known_bugs import MESSAGE, run_until, settings
from tests.support.redis_server import delete_prefix, unique_prefix

pytestmark = pytest.mark.django_db(
    transaction=True, databases=["default", "pg"] if "pg" in django_settings.DATABASES else ["default"]
)

#: How the lease is lost. "before": another worker claims the item just before the completion (LEASE_LOST);
#: "renewer": it claims it as the SMTP transaction ends, and the renewer finds that before the completion runs;
#: "finished": the worker stalls past its lease while another claims the item and finishes it (gone: None).
MODES = ["before", "renewer", "finished"]


class Thieving:
    """A store (mixed in before it) whose items another worker takes as `mode` says."""

    mode = "before"
    clock: FakeClock
    worker: Worker

    async def steal(self, finish: CompleteRequest | None = None) -> None:
        """Another worker claims the item; with `finish`, this worker stalls two minutes while it records that
        completion as its own (the item done, gone)."""
        store: Any = self
        now = self.clock.now() + timedelta(days=1)  # the thief's clock: this worker's lease long expired
        (taken,) = await store.aclaim(owner="thief", now=now, lease_expires=now + timedelta(seconds=60))
        if finish is not None:
            self.clock.advance(120)
            await store.acomplete(taken.id, owner="thief", revision=taken.revision, completion=finish.completion)

    async def acomplete_many(self, requests: Sequence[CompleteRequest], *, also: AlsoWrite | None = None) -> Any:
        if self.mode == "before":
            await self.steal()
        elif self.mode == "renewer":
            for _ in range(100):  # the renewer (every LEASE / 2) finds the lease gone first
                if self.worker.stats.leases_lost:
                    break
                await asyncio.sleep(0.05)
            assert self.worker.stats.leases_lost, "the renewer never found the lease gone"
        elif self.mode == "finished":
            await self.steal(finish=requests[0])
        store: Any = super()
        return await store.acomplete_many(requests, also=also)


class StealingDeliverer(ScriptedDeliverer):
    """Delivers, then (mode "renewer") has the item taken by another worker as the SMTP transaction ends."""

    store: Any = None

    async def deliver(self, sender: str, recipients: Sequence[str], message: bytes) -> AttemptResult:
        result = await super().deliver(sender, recipients, message)
        if self.store.mode == "renewer":
            await self.store.steal()
        return result


class ThievingMemory(Thieving, MemoryStore):
    pass


class ThievingRedis(Thieving, RedisStore):
    pass


class ThievingOrm(Thieving, OrmStore):
    pass


@pytest.fixture(params=["memory", "redis", "orm-sqlite", pytest.param("orm-pg", marks=pytest.mark.postgres)])
def store_and_history(request: pytest.FixtureRequest) -> Iterator[tuple[Callable[[], Any], str]]:
    """A maker of the thieving store, and the database its worker's history goes to."""
    kind = request.param
    if kind == "memory":
        yield ThievingMemory, "default"
    elif kind == "redis":
        url, prefix = request.getfixturevalue("redis_url"), unique_prefix("leaselost")
        yield (lambda: ThievingRedis({"url": url, "key_prefix": prefix})), "default"
        delete_prefix(url, prefix)
    elif kind == "orm-sqlite":
        yield ThievingOrm, "default"
    else:
        alias = request.getfixturevalue("pg_alias")
        yield (lambda: ThievingOrm({"database": alias})), alias


@pytest.mark.parametrize("mode", MODES)
async def test_an_attempt_whose_lease_was_lost_keeps_its_rows_marked(
    mode: str, store_and_history: tuple[Callable[[], Any], str]
) -> None:
    make, alias = store_and_history
    clock = FakeClock()
    store = make()
    store.mode, store.clock = mode, clock
    deliverer = StealingDeliverer()
    deliverer.store = store
    history = History(alias)
    assert store.completes_with_history(alias) == isinstance(store, OrmStore)
    try:
        item = await store.aadd(NewItem("a@origin.test", ("b@dest.test",), MESSAGE), now=clock.now())
        worker = Worker(store=store, settings=settings(lease=1.0), deliverer=deliverer, clock=clock, history=history)
        store.worker = worker
        await run_until(worker, lambda: worker.stats.leases_lost > 0, timeout=20)
        left = await store.aget(item.id)
    finally:
        await store.aclose()

    def read() -> list[tuple[str, str, int, bool]]:
        try:
            records = DeliveryRecord.objects.using(alias).filter(item_id=item.id)
            return list(records.values_list("recipient", "state", "attempt", "lease_lost"))
        finally:
            connections[alias].close()  # asgiref's thread keeps no session: the test database can be dropped

    rows = await sync_to_async(read)()
    # The attempt reached a server: its row is there, and says its outcome was not recorded.
    assert rows == [("b@dest.test", "delivered", 1, True)], rows
    assert worker.stats.leases_lost == 1 and deliverer.deliveries_to("b@dest.test") == 1, worker.stats
    assert "LEASE_LOST" in worker.stats.errors, worker.stats
    if mode == "finished":
        assert left is None  # the other worker's outcome is the item's
    else:
        assert left is not None and left.owner == "thief" and left.attempts == 0  # nothing of ours recorded


def test_the_thieving_stores_are_stores() -> None:
    for kind in (ThievingMemory, ThievingRedis, ThievingOrm):
        assert issubclass(kind, QueueStore) and not kind.__abstractmethods__
