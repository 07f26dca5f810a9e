"""The Redis store's search indexes (`words`, `addrs`): kept by the scripts that write the items, read by the
search, and built for a queue whose items came before them or before their layout (`mailqueue_search_index`)."""

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


def indexes(store: RedisStore) -> tuple[set[bytes], set[bytes]]:
    """The search's keys as they are: `words` and `addrs` (every entry scored 0)."""
    client = store._do(lambda client: client)
    found = [dict(client.zrange(key, 0, -1, withscores=True)) for key in (store.keys.words, store.keys.addrs)]
    assert {score for entries in found for score in entries.values()} <= {0.0}
    return set(found[0]), set(found[1])


def expected(store: RedisStore) -> tuple[set[bytes], set[bytes]]:
    """The search's keys as the items in the store say they should be."""
    client = store._do(lambda client: client)
    words, addrs = set(), set()
    for item in store.list(limit=1000):
        member = client.hget(store.keys.item(item.id), "member")
        words |= {word.encode() + b"\0" + member for word in subject_words(item.subject)}
        addrs |= {r.address.lower().encode() + b"\0" + member for r in item.recipients}
    return words, addrs


def old_word_sets(store: RedisStore) -> dict[str, dict[bytes, float]]:
    """The `word:<w>` sets of the layout before `words`, each word's members by next attempt."""
    client = store._do(lambda client: client)
    found = {}
    for key in client.scan_iter(match=f"{store.keys.prefix}word:*"):
        found[key.decode().rpartition("word:")[2]] = dict(client.zrange(key, 0, -1, withscores=True))
    return found


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
    assert old_word_sets(store) == {}  # no key a word
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
    for key in (store.keys.words, store.keys.addrs, store.keys.search_layout):
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
    assert client.get(store.keys.search_layout) == b"2"
    assert indexes(store) == expected(store)
    fresh = RedisStore({"url": redis_url, "key_prefix": store.key_prefix})
    assert fresh._term_members(query) is not None
    assert {i.id for i in fresh.list(query)} == {*(i.id for i in kept), added.id}
    assert fresh.build_search_index() == 3  # again: the same indexes
    assert indexes(store) == expected(store)


def test_a_queue_of_the_word_sets_before_is_reindexed_and_its_word_sets_deleted(
    store: RedisStore, settings: Any, redis_url: str
) -> None:
    kept = fill(store)
    client = store._do(lambda client: client)
    # as the layout before `words` left it: a sorted set a word, by next attempt, and its mark `search_index`
    client.delete(store.keys.words, store.keys.search_layout)
    client.set(store.keys.search_index, "1")
    for item in kept:
        member = client.hget(store.keys.item(item.id), "member")
        for word in subject_words(item.subject):
            client.zadd(store.keys.word(word), {member: float(client.zscore(store.keys.items, member))})
    # and an item removed since, still in its word's set
    client.zadd(store.keys.word("march"), {b"0000000000000099:" + str(kept[0].id).encode()[:-1] + b"0": 5.0})
    assert set(old_word_sets(store)) == {"invoice", "7", "for", "march", "news"}
    reader = RedisStore({"url": redis_url, "key_prefix": store.key_prefix})
    query = ItemQuery(search="invoice")
    assert reader._term_members(query) is None  # the layout before: the items are read and tested
    assert [i.id for i in reader.list(query)] == [kept[0].id]
    settings.MAILQUEUE = {"STORE": {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": {
        "url": redis_url, "key_prefix": store.key_prefix}}}  # fmt: skip
    call_command("mailqueue_search_index")
    assert old_word_sets(store) == {}
    assert client.get(store.keys.search_index) is None
    assert client.get(store.keys.search_layout) == b"2"
    assert indexes(store) == expected(store)
    fresh = RedisStore({"url": redis_url, "key_prefix": store.key_prefix})
    assert [i.id for i in fresh.list(query)] == [kept[0].id]
    assert fresh._term_members(query) is not None
