"""A call whose answer is lost is sent again, and does nothing twice: the replay markers of add, claim and
complete (lua/replay.lua), through a proxy that loses one reply on its way back from a real Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from django_mailqueue.core.errors import QueueError
from django_mailqueue.core.items import CompleteRequest, Completion, RecipientState
from django_mailqueue.stores import redis_scripts as scripts
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import LATER, T0, at, new_item, outcome
from tests.support.lossy_proxy import LossyProxy
from tests.support.redis_server import delete_prefix

pytestmark = pytest.mark.redis

DONE = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=at(1))
LATER_ON = Completion((outcome("rcpt@example.org", RecipientState.PENDING, LATER),), next_attempt=at(600))


@pytest.fixture
def proxy(redis_url: str) -> Iterator[LossyProxy]:
    parts = urlsplit(redis_url)
    with LossyProxy(parts.port or 6379) as lossy:
        yield lossy


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    name = f"mqtest-replay-{uuid.uuid4().hex[:10]}:"
    yield name
    delete_prefix(redis_url, name)


def through(proxy: LossyProxy, redis_url: str, prefix: str, **options: object) -> RedisStore:
    """A store that reaches the test Redis through the proxy, retrying calls for 10 s."""
    database = urlsplit(redis_url).path or "/0"
    url = f"redis://127.0.0.1:{proxy.port}{database}"
    store = RedisStore({"url": url, "key_prefix": prefix, "failover_timeout": 10, **options})
    store.count()  # connected, the prefix checked: the next reply lost is the call's
    return store


def test_an_add_whose_answer_is_lost_is_stored_once(proxy: LossyProxy, redis_url: str, prefix: str) -> None:
    store = through(proxy, redis_url, prefix)
    proxy.lose_reply()
    added = store.add(new_item(), now=T0)
    assert proxy.lost == 1
    assert [i.id for i in store.list()] == [added.id]  # the retry found its marker: not "a duplicate id"
    store.close()


def test_without_retries_the_lost_answer_is_an_error_and_the_add_happened(
    proxy: LossyProxy, redis_url: str, prefix: str
) -> None:
    store = through(proxy, redis_url, prefix, failover_timeout=0)
    item = new_item()
    proxy.lose_reply()
    with pytest.raises(QueueError) as lost:
        store.add(item, now=T0)
    assert lost.value.code == "STORE_UNAVAILABLE"
    assert [i.id for i in store.list()] == [item.id]  # what the caller must allow for: it may have been stored
    store.close()


def test_a_claim_whose_answer_is_lost_gives_the_same_items_once(proxy: LossyProxy, redis_url: str, prefix: str) -> None:
    store = through(proxy, redis_url, prefix)
    added = store.add_many([new_item() for _ in range(3)], now=T0)
    proxy.lose_reply()
    claimed = store.claim(owner="w", now=T0, lease_expires=at(60), limit=2)
    assert proxy.lost == 1
    assert [i.id for i in claimed] == [i.id for i in added[:2]]
    assert [(i.revision, i.reclaims) for i in claimed] == [(1, 0), (1, 0)]  # leased once, not twice
    assert [i.id for i in store.claim(owner="other", now=T0, lease_expires=at(60), limit=5)] == [added[2].id]
    store.close()


@pytest.mark.parametrize("completion", [DONE, LATER_ON], ids=["dropped", "recorded"])
def test_a_completion_whose_answer_is_lost_is_recorded_once(
    proxy: LossyProxy, redis_url: str, prefix: str, completion: Completion
) -> None:
    store = through(proxy, redis_url, prefix)
    store.add(new_item(), now=T0)
    (item,) = store.claim(owner="w", now=T0, lease_expires=at(60))
    proxy.lose_reply()
    assert store.get(item.id) == item  # a read is read again
    proxy.lose_reply()  # the script's answer lost (the claimed item is not read again first)
    after = store.complete(item.id, owner="w", revision=item.revision, completion=completion)
    assert proxy.lost == 2
    # not LEASE_LOST, not "no such item": the retried script found its marker
    assert after is not None and after.attempts == 1
    stored = store.get(item.id)
    if completion is DONE:
        assert after.done and stored is None
    else:
        assert stored is not None and stored.revision == item.revision + 1 and stored.attempts == 1
    store.close()


def test_a_batch_of_completions_whose_answer_is_lost(proxy: LossyProxy, redis_url: str, prefix: str) -> None:
    store = through(proxy, redis_url, prefix)

    async def run() -> list[object]:
        try:
            await store.aadd_many([new_item() for _ in range(3)], now=T0)
            claimed = await store.aclaim(owner="w", now=T0, lease_expires=at(60), limit=3)
            requests = [CompleteRequest(i.id, "w", i.revision, LATER_ON) for i in claimed]
            proxy.lose_reply()  # the scripts' answers lost (one pipeline: the claimed items are not read first)
            return await store.acomplete_many(requests)
        finally:
            await store.aclose()

    answers = asyncio.run(run())
    assert proxy.lost == 1
    assert all(not isinstance(a, QueueError) and a is not None and a.attempts == 1 for a in answers)
    assert [i.revision for i in store.list()] == [2, 2, 2]
    store.close()


def test_the_revision_check_alone_never_records_twice(redis_url: str, prefix: str) -> None:
    """Without a marker (no retries), the same completion sent twice is refused the second time (0):
    the claim's revision it names has moved on."""
    store = RedisStore({"url": redis_url, "key_prefix": prefix})
    store.add(new_item(), now=T0)
    (item,) = store.claim(owner="w", now=T0, lease_expires=at(60))
    before = store._read_before(item.id, "w", item.revision, store._do(lambda c: c.hgetall(store.keys.item(item.id))))
    assert before is not None
    _, item_keys, item_values = store._complete_item(CompleteRequest(item.id, "w", item.revision, LATER_ON), *before)
    keys, args = store._complete_call([(item_keys, item_values)], None)
    assert not [key for key in keys if ":replay:" in key]  # no marker
    assert store._do(lambda c: scripts.COMPLETE.run(c, keys, args)) == [1]
    assert store._do(lambda c: scripts.COMPLETE.run(c, keys, args)) == [0]
    stored = store.get(item.id)
    assert stored is not None and stored.revision == item.revision + 1 and stored.attempts == 1
    store.close()
