"""The Redis store's search indexes (`word:<w>`, `addrs`): kept by the scripts that write the items, read by the
search, and built for a queue whose items came before them (`mailqueue_search_index`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command

from django_mailqueue.core.items import Completion, ItemQuery, RecipientState, matches
from django_mailqueue.core.search import subject_words
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import new_item, outcome
from django_mailqueue.testing.contract.support import T0, at
from tests.stores.conftest import Maker

pytestmark = pytest.mark.redis


@pytest.fixture
def store(make: Maker) -> RedisStore:
    """A Redis store on the test's own prefix (the stores' shared `make`)."""
    return make()


SEARCHES = ("ann", "ANN@ALPHA.example", "ann.lee", "invoice", "march", "invoice march", "@beta.example bob", "zz")


def indexes(store: RedisStore) -> tuple[dict[str, dict[bytes, float]], set[bytes]]:
    """The search's keys as they are: each word set's members and scores, and `addrs`."""
    client = store._do(lambda client: client)
    words = {}
    for key in client.scan_iter(match=f"{store.keys.prefix}word:*"):
        word = key.decode().rpartition("word:")[2]
        words[word] = dict(client.zrange(key, 0, -1, withscores=True))
    return words, set(client.zrange(store.keys.addrs, 0, -1))


def expected(store: RedisStore) -> tuple[dict[str, dict[bytes, float]], set[bytes]]:
    """The search's keys as the items in the store say they should be."""
    client = store._do(lambda client: client)
    words: dict[str, dict[bytes, float]] = {}
    addrs = set()
    for item in store.list(limit=1000):
        member = client.hget(store.keys.item(item.id), "member")
        score = float(client.zscore(store.keys.items, member))
        for word in subject_words(item.subject):
            words.setdefault(word, {})[member] = score
        addrs |= {r.address.lower().encode() + b"\0" + member for r in item.recipients}
    return words, addrs


def fill(store: RedisStore) -> list[Any]:
    items = [
        store.add(new_item(["Ann@Alpha.example"], subject="Invoice 7 for March"), now=T0),
        store.add(new_item(["ann.lee@alpha.example", "bob@beta.example"], subject="March news"), now=T0),
        store.add(new_item(["bob@beta.example"], subject="Your invoice"), now=T0),
        store.add(new_item(["cat@gamma.example"], subject="Welcome"), now=T0),
    ]
    # move them as a worker does: a deferral, a reschedule, a cancel, a delivery
    claimed = {i.id: i for i in store.claim(owner="w", now=T0, lease_expires=at(60), limit=10)}
    later = Completion((outcome("ann@alpha.example", RecipientState.PENDING),), next_attempt=at(300))
    store.complete(items[0].id, owner="w", revision=claimed[items[0].id].revision, completion=later)
    store.reschedule(items[1].id, at=at(900), owner="w")
    store.cancel(items[3].id)
    done = Completion((outcome("bob@beta.example", RecipientState.DELIVERED),), next_attempt=at(1000))
    store.complete(items[2].id, owner="w", revision=claimed[items[2].id].revision, completion=done)
    return items[:2]


def test_the_scripts_keep_the_search_indexes_as_the_items_move(store: RedisStore) -> None:
    fill(store)
    assert indexes(store) == expected(store)
    assert store._search_ready()
    kept = store.list(limit=100)
    for search in SEARCHES:
        query = ItemQuery(search=search)
        assert store._term_members(query) is not None, search  # read from the indexes
        want = [i.id for i in kept if matches(i, query)]
        assert [i.id for i in store.list(query)] == want, search
        assert store.count(query) == len(want), search


def test_a_queue_from_before_the_indexes_is_searched_by_reading_until_they_are_built(
    store: RedisStore, settings: Any, redis_url: str
) -> None:
    kept = fill(store)
    client = store._do(lambda client: client)
    # as a queue written before the search's indexes: no mark, no word or address sets, no terms in the hashes
    for key in [*client.scan_iter(match=f"{store.keys.prefix}word:*"), store.keys.addrs, store.keys.search_index]:
        client.delete(key)
    for item in kept:
        client.hdel(store.keys.item(item.id), "words", "addrs")
    reader = RedisStore({"url": redis_url, "key_prefix": store.key_prefix})
    query = ItemQuery(search="march")
    assert reader._term_members(query) is None  # not built: the items are read and tested
    assert {i.id for i in reader.list(query)} == {i.id for i in kept}
    added = reader.add(new_item(["dan@delta.example"], subject="March again"), now=T0 + timedelta(seconds=1))
    settings.MAILQUEUE = {"STORE": {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": {
        "url": redis_url, "key_prefix": store.key_prefix}}}  # fmt: skip
    call_command("mailqueue_search_index")
    assert client.get(store.keys.search_index) == b"1"
    assert indexes(store) == expected(store)
    fresh = RedisStore({"url": redis_url, "key_prefix": store.key_prefix})
    assert fresh._term_members(query) is not None
    assert {i.id for i in fresh.list(query)} == {*(i.id for i in kept), added.id}
    assert fresh.build_search_index() == 3  # again: the same indexes
    assert indexes(store) == expected(store)
