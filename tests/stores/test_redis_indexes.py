"""The Redis store's admin indexes (queue, domain, tried sets): kept by every script that writes an item, and
read by select.lua to list and count exactly what `matches` says, in the list's order."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import redis

from django_mailqueue.core.items import Completion, ItemOrder, ItemQuery, ItemState, RecipientState, matches
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.stores.redis_layout import Keys, domains, seed_commands
from django_mailqueue.testing.contract import LATER, OK, at, new_item, outcome
from tests.stores.conftest import Maker

pytestmark = pytest.mark.redis


@pytest.fixture
def store(make: Maker) -> RedisStore:
    """A Redis store on the test's own prefix (the stores' shared `make`)."""
    return make()


def churn(store: RedisStore) -> None:
    """Items through every script that writes one: add, claim, complete (kept, dropped, given back, with a
    DSN), reschedule with and without an owner, cancel, an expired lease, a suspended destination's items."""
    domains_ = ["alpha.example", "Beta.example", "gamma.example"]
    for n in range(24):
        store.add(
            new_item(
                [f"r{n}@{domains_[n % 3]}", f"s{n}@{domains_[(n + 1) % 3]}"]
                if n % 4 == 0
                else [f"r{n}@{domains_[n % 3]}"],
                queue=("bulk", "default", "news")[n % 3],
                not_before=at(50 + n) if n % 5 == 0 else None,
            ),
            now=at(n % 4),
        )
    taken = store.claim(owner="w", now=at(10), lease_expires=at(30), limit=12)
    for k, item in enumerate(taken):
        first = item.recipients[0].address
        if k % 4 == 0:  # deferred
            store.complete(
                item.id, owner="w", revision=item.revision,
                completion=Completion((outcome(first, RecipientState.PENDING, LATER),), next_attempt=at(40 + k)),
            )  # fmt: skip
        elif k % 4 == 1:  # done: dropped, with a DSN to the sender
            dsn = new_item(["sender@dsn.example"], sender="", queue="dsn")
            store.complete(
                item.id, owner="w", revision=item.revision,
                completion=Completion(
                    tuple(outcome(r.address, RecipientState.FAILED) for r in item.recipients),
                    next_attempt=at(60), dsns=(dsn,), now=at(11),
                ),
            )  # fmt: skip
        elif k % 4 == 2:  # given back untried
            store.complete(
                item.id, owner="w", revision=item.revision,
                completion=Completion((), next_attempt=at(12), count_attempt=False),
            )  # fmt: skip
        # k % 4 == 3: stays leased (its lease expires at 30)
    rest = store.list(limit=100)
    store.reschedule(rest[0].id, at=at(5))
    store.reschedule(rest[-1].id, at=at(1))
    store.cancel(rest[1].id)
    store.cancel(rest[2].id)
    deferred = [i for i in rest if i.attempts]
    store.reschedule(deferred[0].id, at=at(2))
    store.defer_destination(["gamma.example"], until=at(38), now=at(36))  # a suspended destination
    for item in store.claim(owner="x", now=at(41), lease_expires=at(45), limit=2):  # may take an expired lease
        delivered = (outcome(item.recipients[0].address, RecipientState.DELIVERED, OK),)
        store.complete(
            item.id, owner="x", revision=item.revision, completion=Completion(delivered, next_attempt=at(70))
        )


def test_every_filter_lists_and_counts_what_matches_says_in_the_list_order(store: RedisStore) -> None:
    churn(store)
    everything = store.list(limit=1000)
    assert len(everything) == store.count() > 15
    for when, state in ((at(20), ItemState.LEASED), (at(20), ItemState.DEFERRED), (at(0), ItemState.SCHEDULED)):
        assert any(i.state_at(when) is state for i in everything), state
    queues = sorted({i.queue for i in everything})
    assert store.queues() == queues
    for when, state, queue, domain in itertools.product(
        (at(0), at(20), at(35), at(100)),
        (None, *ItemState),
        (None, *queues, "none"),
        (None, "alpha.example", "beta.example", "gamma.example", "dsn.example", "none.example"),
    ):
        query = ItemQuery(state=state, queue=queue, domain=domain, now=when)
        expected = [i.id for i in everything if matches(i, query)]
        label = f"{when} {state} {queue} {domain}"
        assert [i.id for i in store.list(query, limit=1000)] == expected, label
        backwards = store.list(query, limit=1000, order=ItemOrder.NEXT_ATTEMPT_DESC)
        assert [i.id for i in backwards] == expected[::-1], label
        assert [i.id for i in store.list(query, offset=1, limit=2)] == expected[1:3], label
        assert store.count(query) == len(expected), label
        assert store.count(query, limit=2) == min(2, len(expected)), label
        assert [i.id for i in store.iter_items(query, batch=2)] == expected, label
        for item in everything[:3]:
            by_id = ItemQuery(state=state, queue=queue, domain=domain, now=when, id_prefix=item.id.hex[:8])
            assert [i.id for i in store.list(by_id)] == [i.id for i in everything if matches(i, by_id)], label
        searched = ItemQuery(state=state, queue=queue, domain=domain, now=when, search="r1")
        assert [i.id for i in store.iter_items(searched, batch=2)] == [
            i.id for i in everything if matches(i, searched)
        ], label


def test_the_overview_counts_each_state_in_one_script_as_matches_says(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """overview.lua: every state of the queue and of each queue, leases read once, as `matches` counts them."""
    from django_mailqueue.stores import redis_scripts

    churn(store)
    everything = store.list(limit=1000)
    ran: list[str] = []
    for script in (redis_scripts.SELECT, redis_scripts.OVERVIEW):
        original = script.run

        def recording(client: object, keys: object, args: list[object], _run=original, _name=script.name) -> object:
            ran.append(_name)
            return _run(client, keys, args)  # type: ignore[arg-type]

        monkeypatch.setattr(script, "run", recording)
    for when in (at(0), at(20), at(35), at(100)):
        ran.clear()
        summary = store.overview(now=when, bound=1000)
        # the counts, asking once for the items of the leases scored after now when there are any (overview.lua
        # reads only the items it is given); then the deferred and the oldest, each asking at most once
        held = any(
            i.owner is not None and max(i.lease_expires or i.next_attempt, i.next_attempt) > when for i in everything
        )
        assert ran.count("overview") == (2 if held else 1) and 2 <= ran.count("select") <= 4
        for state in ItemState:
            assert summary.by_state[state.value] == sum(1 for i in everything if i.state_at(when) is state)
            for queue in store.queues():
                expected = sum(1 for i in everything if i.queue == queue and i.state_at(when) is state)
                assert summary.by_queue[queue][state.value] == expected, (when, state, queue)
        assert summary.total == len(everything)
        assert store.overview(now=when, bound=1).total == 2


def test_the_indexes_hold_each_item_and_nothing_else(store: RedisStore, redis_url: str) -> None:
    churn(store)
    keys = Keys(store.key_prefix)
    client = redis.Redis.from_url(redis_url)
    items = {i.id: i for i in store.list(limit=1000)}
    members = {item_id: client.hget(keys.item(item_id), "member").decode() for item_id in items}
    expected: dict[str, set[str]] = {}
    for item_id, item in items.items():
        wanted = [keys.queue(item.queue), *(keys.domain(d) for d in domains(item.recipients).split())]
        if item.attempts:
            wanted += [keys.tried, keys.tried_queue(item.queue)]
            wanted += [keys.tried_domain(d) for d in domains(item.recipients).split()]
        for key in wanted:
            expected.setdefault(key, set()).add(members[item_id])
    found = {
        key.decode(): {m.decode() for m in client.zrange(key, 0, -1)}
        for pattern in ("queue:*", "domain:*", "tried*")
        for key in client.scan_iter(match=f"{store.key_prefix}{pattern}")
    }
    assert found == expected
    assert {m.decode() for m in client.zrange(keys.ids, 0, -1)} == {item_id.hex for item_id in items}
    for key, held in found.items():  # scored by the next attempt
        for member in held:
            item = items[next(i for i, m in members.items() if m == member)]
            assert client.zscore(key, member) == int(item.next_attempt.timestamp() * 1_000_000), key
    client.close()


def test_an_item_written_by_seed_commands_is_the_item_the_scripts_write(store: RedisStore, redis_url: str) -> None:
    """bench/admin_seed.py loads a big queue with `seed_commands`: the keys must be the scripts' own."""
    churn(store)
    client = redis.Redis.from_url(redis_url)
    before = {key: _dump(client, key) for key in client.scan_iter(match=f"{store.key_prefix}*")}
    assert any(b":tried_domain:" in key for key in before) and any(b":domain:" in key for key in before)
    items = store.list(limit=1000)
    seqs = {i.id: int(client.hget(Keys(store.key_prefix).item(i.id), "member").decode()[:16]) for i in items}
    messages = {i.id: store.read_message(i.id) for i in items}
    keep = {Keys(store.key_prefix).schema.encode(), Keys(store.key_prefix).seq.encode()}
    keep.add(Keys(store.key_prefix).search_layout.encode())  # set with the schema (schema.lua, the seed)
    for key in before:
        if key not in keep:
            client.delete(key)
    pipe = client.pipeline(transaction=False)
    for item in items:
        message = messages[item.id]
        assert message is not None
        for command in seed_commands(Keys(store.key_prefix), item, seqs[item.id], message):
            pipe.execute_command(*command)
    pipe.execute()
    after = {key: _dump(client, key) for key in client.scan_iter(match=f"{store.key_prefix}*")}
    # the scripts leave the queues' ready sets, leases and name sets as seed_commands writes them, less the
    # names of queues emptied meanwhile (the claim prunes `queues`)
    for key in set(before) | set(after):
        if key.endswith((b"queues", b"queue_names")):
            assert after.get(key, set()) <= before.get(key, set()) | after.get(key, set())
            continue
        assert after.get(key) == before.get(key), key
    client.close()


def _dump(client: redis.Redis, key: bytes) -> object:
    kind = client.type(key).decode()
    if kind == "hash":
        return client.hgetall(key)
    if kind == "zset":
        return client.zrange(key, 0, -1, withscores=True)
    if kind == "set":
        return client.smembers(key)
    return client.get(key)


def test_an_unfiltered_query_reads_one_page_by_rank(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The admin always passes an `ItemQuery` (with `now`): without a filter, the list reads its 51 items by rank."""
    from django_mailqueue.stores import redis_scripts

    store.add_many([new_item([f"r{n}@x.example"]) for n in range(600)], now=at(0))
    calls: list[tuple[str, list[object]]] = []
    original = redis_scripts.SELECT.run

    def recording(client: object, keys: object, args: list[object]) -> object:
        calls.append(("select", list(args)))
        return original(client, keys, args)  # type: ignore[arg-type]

    def paging(first: int, count: int, *, reverse: bool = False, _page: Any = store._page) -> Any:
        calls.append(("page", [first, count, reverse]))
        return _page(first, count, reverse=reverse)

    monkeypatch.setattr(redis_scripts.SELECT, "run", recording)
    monkeypatch.setattr(store, "_page", paging)
    page = store.list(ItemQuery(now=at(5)), offset=50, limit=51)
    assert len(page) == 51 and calls == [("page", [50, 51, False])]
    assert store.count(ItemQuery(now=at(5)), limit=10_001) == 600 and len(calls) == 1
