"""The Redis store's batched add (store_items.lua): one `add_many` writes exactly the keys its items added one by
one write, past the script's chunk of 1,000 a command, and finds a queued id in any chunk."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from django_mailqueue.core.errors import QueueError
from django_mailqueue.core.items import NewItem
from django_mailqueue.testing.contract import at, new_item
from tests.stores.conftest import Maker
from tests.support.redis_server import delete_prefix, unique_prefix

pytestmark = pytest.mark.redis

#: past store_items.lua's first chunk (CHUNK = 1,000 keys or pairs a command)
COUNT = 1_234


@pytest.fixture
def other_prefix(redis_url: str) -> Iterator[str]:
    prefix = unique_prefix()
    yield prefix
    delete_prefix(redis_url, prefix)


def items(count: int) -> list[NewItem]:
    """Items that share queues, domains, addresses and subject words, and some that have a word of their own,
    no word at all, a bare local part, several recipients in mixed case, a later first attempt."""
    domains = ["alpha.example", "Beta.example", "gamma.example", "delta.example"]
    subjects = ["Invoice {n} for March", "March news", "", "weekly report", "Re: invoice {n}", "!!!"]
    made = []
    for n in range(count):
        recipients = [f"r{n % 500}@{domains[n % 4]}"]
        if n % 7 == 0:
            recipients += [f"R{n % 500}@{domains[n % 4].upper()}", f"s{n}@{domains[(n + 1) % 4]}"]
        if n % 97 == 0:
            recipients.append("postmaster")
        made.append(
            new_item(
                recipients,
                queue=("default", "bulk", "news")[n % 3],
                subject=subjects[n % len(subjects)].format(n=n),
                not_before=at(100 + n % 11) if n % 5 == 0 else None,
                message=b"Subject: x\r\n\r\n" + str(n).encode() + b"\r\n",
            )
        )
    return made


def dump(client: redis.Redis, prefix: str) -> dict[str, object]:
    """Every key under `prefix` (by its name after it) with what it holds."""
    found: dict[str, object] = {}
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        name, kind = key.decode()[len(prefix) :], client.type(key).decode()
        if kind == "hash":
            found[name] = client.hgetall(key)
        elif kind == "zset":
            found[name] = client.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            found[name] = client.smembers(key)
        else:
            found[name] = client.get(key)
    return found


def test_one_add_many_writes_what_its_items_added_one_by_one_write(
    make: Maker, redis_url: str, redis_prefix: str, other_prefix: str
) -> None:
    batch = items(COUNT)
    at_once, one_by_one = make(), make(key_prefix=other_prefix)
    at_once.add(batch[0], now=at(0))  # the sequence counter already there, as on a queue in use
    at_once.add_many(batch[1:], now=at(1))
    one_by_one.add(batch[0], now=at(0))
    for item in batch[1:]:
        one_by_one.add(item, now=at(1))
    client = redis.Redis.from_url(redis_url)
    written, reference = dump(client, redis_prefix), dump(client, other_prefix)
    client.close()
    assert written.keys() == reference.keys()
    assert {"words", "addrs", "domain:beta.example", "ready:bulk"} <= written.keys()
    assert not any(name.startswith("word:") for name in written)  # no key a word: `words` holds them all
    assert {b"invoice\0", b"1000\0"} <= {entry.partition(b"\0")[0] + b"\0" for entry, _ in written["words"]}
    for name in reference:
        assert written[name] == reference[name], name


def test_an_add_many_names_the_queued_id_in_any_chunk_and_writes_nothing(make: Maker, redis_url: str) -> None:
    store = make()
    batch = items(COUNT)
    queued = store.add(batch[1_100], now=at(0))
    before = store.count()
    with pytest.raises(QueueError) as raised:
        store.add_many(batch, now=at(1))
    assert str(queued.id) in str(raised.value)
    assert store.count() == before == 1
    assert store.add_many(batch[:1_100], now=at(1))[-1].id == batch[1_099].id
    assert store.count() == 1_101
