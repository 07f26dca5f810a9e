"""A claimed batch is one store call of the worker's (`aclaim_batch`): one hand-off to the database thread on the
ORM store (SQLite, PostgreSQL), the claim's round trips and one more on Redis — and what that call read (the
listed recipients, the messages) is what the worker acts on."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import pytest

from django_mailqueue.conf import load_settings
from django_mailqueue.core.clock import FakeClock
from django_mailqueue.core.items import NewItem, Reply, Suppression
from django_mailqueue.stores.base import QueueStore
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.fakes import ScriptedDeliverer
from django_mailqueue.worker import Worker
from tests.support.databases import DATABASES
from tests.support.redis_server import delete_prefix, unique_prefix

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)

ITEMS = 30
MESSAGE = b"From: a@example.com\r\nSubject: hi\r\n\r\nbody\r\n"
#: the store methods a claimed batch may call, each watched for the hand-offs (round trips) made within it
BATCH_CALLS = ("aclaim_batch", "aclaim", "asuppressed", "aread_messages", "aread_message")


#: the count of hand-offs (round trips) of the watched call under way in this task, if any
WITHIN: ContextVar[list[int] | None] = ContextVar("WITHIN", default=None)


def watch(store: QueueStore) -> list[tuple[str, int]]:
    """Each call of `BATCH_CALLS` on `store` (by name, outermost only), with the hand-offs (round trips) `counted`
    within it — its own, not those other tasks of the worker make meanwhile."""
    calls: list[tuple[str, int]] = []
    for name in BATCH_CALLS:
        method = getattr(store, name, None)
        if method is None:
            continue

        async def watched(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            if WITHIN.get() is not None:
                return await _method(*args, **kwargs)
            within = [0]
            token = WITHIN.set(within)
            try:
                return await _method(*args, **kwargs)
            finally:
                WITHIN.reset(token)
                calls.append((_name, within[0]))

        setattr(store, name, watched)
    return calls


def counted() -> None:
    within = WITHIN.get()
    if within is not None:
        within[0] += 1


def fill(store: QueueStore, clock: FakeClock) -> None:
    """30 messages to two recipients each, the first of each on the suppression list."""
    now = clock.now()
    store.suppress([Suppression(f"gone{i}@dest.test", Reply(550, "5.1.1", "gone"), now) for i in range(ITEMS)])
    store.add_many(
        [NewItem("a@origin.test", (f"gone{i}@DEST.test", f"fine{i}@dest.test"), MESSAGE) for i in range(ITEMS)],
        now=now,
    )


async def run(store: QueueStore, clock: FakeClock) -> ScriptedDeliverer:
    settings = load_settings({"HOSTNAME": "mq.test.example", "POLL_INTERVAL": 0.05, "CONCURRENCY": 100, "DSN": False})
    deliverer = ScriptedDeliverer()
    worker = Worker(
        store=store,
        settings=settings,
        deliverer=deliverer,
        clock=clock,
        once=True,
        owner="w",
        rng=random.Random(1),
        close_store=True,  # its threads and their connections, a PostgreSQL listener's
    )
    stats = await worker.run()
    assert stats.errors == [] and stats.claimed == ITEMS
    return deliverer


def check_delivered(deliverer: ScriptedDeliverer) -> None:
    """Every message went to its unlisted recipient only, from the message read with the claim."""
    assert sorted(call.recipients for call in deliverer.calls) == sorted((f"fine{i}@dest.test",) for i in range(ITEMS))
    assert all(call.message == MESSAGE for call in deliverer.calls)


def count_hand_offs(store: OrmStore) -> None:
    """Count the store's hand-offs to its database threads (`counted`)."""
    run_in_thread = store._threads.run

    async def run(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        counted()
        return await run_in_thread(func, *args, **kwargs)

    store._threads.run = run  # type: ignore[method-assign]


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_the_orm_store_claims_looks_up_and_reads_a_batch_in_one_hand_off(
    database: str, request: pytest.FixtureRequest, clock: FakeClock
) -> None:
    alias = "default" if database == "sqlite" else request.getfixturevalue("pg_alias")
    store = OrmStore({"database": alias})
    fill(store, clock)
    count_hand_offs(store)
    calls = watch(store)
    deliverer = asyncio.run(run(store, clock))
    # each claim (the batch's, those that found nothing) one call and one hand-off; no other read
    assert calls and set(calls) == {("aclaim_batch", 1)}, calls
    check_delivered(deliverer)


@pytest.fixture
def redis_store(redis_url: str) -> Iterator[RedisStore]:
    prefix = unique_prefix("batch")
    store = RedisStore({"url": redis_url, "key_prefix": prefix})
    yield store
    store.close()
    delete_prefix(redis_url, prefix)


def test_the_redis_store_reads_a_claimed_batch_in_one_round_trip_after_the_claim(
    redis_store: RedisStore, clock: FakeClock
) -> None:
    fill(redis_store, clock)
    ado = redis_store._ado

    async def round_trip(work: Any) -> Any:
        counted()
        return await ado(work)

    redis_store._ado = round_trip  # type: ignore[method-assign]
    calls = watch(redis_store)
    deliverer = asyncio.run(run(redis_store, clock))
    # the batch: the candidates' read and claim.lua (aclaim's two), then the look-up and the messages in one
    # pipeline; a claim that finds nothing: its read alone
    assert [name for name, _ in calls] == ["aclaim_batch"] * len(calls), calls
    assert calls[0] == ("aclaim_batch", 3) and all(trips == 1 for _, trips in calls[1:]), calls
    check_delivered(deliverer)
