"""The Redis store's completion of an item it claimed: one round trip, made from the item as claimed, with
complete.lua checking the owner and revision (docs/redis.md, "The scripts")."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis

from django_mailqueue.core.errors import Code
from django_mailqueue.core.items import (
    CompleteRequest,
    Completion,
    NewItem,
    QueueItem,
    RecipientState,
    Suppression,
)
from django_mailqueue.exceptions import QueueError
from django_mailqueue.stores import redis_scripts as scripts
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import NO, T0, at, new_item, outcome
from tests.support.redis_server import delete_prefix, unique_prefix

pytestmark = pytest.mark.redis

Maker = Callable[..., RedisStore]

DONE = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=at(1))
LATER = Completion((outcome("rcpt@example.org", RecipientState.PENDING),), next_attempt=at(300))


def counted(store: RedisStore, monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """How many times the store went to Redis through `name` (`_do` or `_ado`: one round trip, retried apart)."""
    calls = [0]
    real = getattr(store, name)

    def call(*args: Any) -> Any:
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(store, name, call)
    return calls


async def test_a_batch_of_completions_of_claimed_items_is_one_round_trip(
    make: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make()
    try:
        for _ in range(3):
            await store.aadd(new_item(), now=T0)
        claimed = await store.aclaim(owner="w", now=T0, lease_expires=at(60), limit=3)
        calls = counted(store, monkeypatch, "_ado")
        answers = await store.acomplete_many([CompleteRequest(i.id, "w", i.revision, DONE) for i in claimed])
        assert calls == [1] and [a.done for a in answers] == [True, True, True]  # type: ignore[union-attr]
        assert await store.acount() == 0
    finally:
        await store.aclose()


def test_a_completion_of_a_claimed_item_is_one_round_trip(make: Maker, monkeypatch: pytest.MonkeyPatch) -> None:
    store = make()
    store.add(new_item(), now=T0)
    (item,) = store.claim(owner="w", now=T0, lease_expires=at(60))
    calls = counted(store, monkeypatch, "_do")
    after = store.complete(item.id, owner="w", revision=item.revision, completion=LATER)
    assert calls == [1] and after is not None
    assert store.get(item.id) == after  # the item as the script left it, computed from the claimed one


async def test_a_claimed_item_another_worker_took_meanwhile_is_lease_lost(make: Maker) -> None:
    """The first worker's claimed item is stale: complete.lua, not a read, finds the other owner."""
    store, rival = make(), make()
    try:
        await store.aadd(new_item(), now=T0)
        (mine,) = await store.aclaim(owner="a", now=T0, lease_expires=at(10))
        (theirs,) = await rival.aclaim(owner="b", now=at(20), lease_expires=at(80))
        (answer,) = await store.acomplete_many([CompleteRequest(mine.id, "a", mine.revision, DONE)])
        assert isinstance(answer, QueueError) and answer.code == Code.LEASE_LOST
        with pytest.raises(QueueError) as lost:
            store.complete(mine.id, owner="a", revision=mine.revision, completion=DONE)
        assert lost.value.code == Code.LEASE_LOST
        assert (await rival.aget(theirs.id)) == theirs  # nothing written by the stale completions
        assert await rival.acomplete(theirs.id, owner="b", revision=theirs.revision, completion=DONE) is not None
    finally:
        await store.aclose()
        await rival.aclose()


async def test_a_claimed_item_cancelled_meanwhile_is_gone(make: Maker) -> None:
    store, admin = make(), make()
    try:
        await store.aadd(new_item(), now=T0)
        (mine,) = await store.aclaim(owner="a", now=T0, lease_expires=at(60))
        assert await admin.acancel(mine.id) is not None
        (answer,) = await store.acomplete_many([CompleteRequest(mine.id, "a", mine.revision, LATER)])
        assert answer is None and await store.acount() == 0
    finally:
        await store.aclose()
        await admin.aclose()


async def test_a_batch_of_completions_is_one_script_call(make: Maker, monkeypatch: pytest.MonkeyPatch) -> None:
    """complete.lua takes the whole batch: one call, its members out of each sorted set together."""
    store = make()
    sent: list[int] = []
    real = scripts.arun_many

    async def recording(client: Any, script: scripts.LuaScript, calls: Any, wait: Any) -> list[Any]:
        if script is scripts.COMPLETE:
            sent.append(len(calls))
        return await real(client, script, calls, wait)

    monkeypatch.setattr(scripts, "arun_many", recording)
    try:
        for _ in range(4):
            await store.aadd(new_item(), now=T0)
        claimed = await store.aclaim(owner="w", now=T0, lease_expires=at(60), limit=4)
        answers = await store.acomplete_many([CompleteRequest(i.id, "w", i.revision, DONE) for i in claimed])
        assert sent == [1] and all(a is not None and a.done for a in answers)  # type: ignore[union-attr]
    finally:
        await store.aclose()


def _dump(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every key under `prefix` (by its name after it) with what it holds; the replay markers left out."""
    found: dict[str, Any] = {}
    for raw in client.scan_iter(match=f"{prefix}*"):
        name = raw.decode()[len(prefix) :]
        kind = client.type(raw).decode()
        if name.startswith("replay:"):
            continue
        if kind == "string":
            found[name] = client.get(raw)
        elif kind == "hash":
            found[name] = client.hgetall(raw)
        elif kind == "zset":
            found[name] = client.zrange(raw, 0, -1, withscores=True)
        else:
            found[name] = sorted(client.smembers(raw))
    return found


async def test_a_batch_writes_what_its_completions_one_by_one_write(redis_url: str) -> None:
    """Each item of a batch all or nothing, in order, as calls one after the other: dropped (with a DSN, with a
    suppression entry), kept failed, deferred, given back, lease lost, gone, a DSN refused, one item twice."""
    ids = [uuid.uuid4() for _ in range(9)]
    queued_dsn, dsn_id = uuid.uuid4(), uuid.uuid4()
    places = ["a.example", "B.example", "c.example"]

    def items() -> list[NewItem]:
        made = [
            new_item(
                [f"r{n}@{places[n % 3]}", f"s{n}@{places[(n + 1) % 3]}"] if n % 3 == 0 else [f"r{n}@{places[n % 3]}"],
                queue=("bulk", "default")[n % 2],
                subject=f"note {n} word{n % 2}",
                id=item_id,
            )
            for n, item_id in enumerate(ids)
        ]
        return [*made, new_item(["late@a.example"], id=queued_dsn, not_before=at(500))]

    def requests(claimed: list[QueueItem]) -> list[CompleteRequest]:
        by_id = {i.id: i for i in claimed}

        def request(n: int, completion: Completion, revision: int | None = None) -> CompleteRequest:
            item = by_id[ids[n]]
            return CompleteRequest(item.id, "w", item.revision if revision is None else revision, completion)

        def all_(n: int, state: RecipientState, **kwargs: Any) -> Completion:
            rcpts = by_id[ids[n]].recipients
            return Completion(tuple(outcome(r.address, state) for r in rcpts), next_attempt=at(90), **kwargs)

        dsn = new_item(["sender@dsn.example"], sender="", queue="dsn", id=dsn_id)
        refused = new_item(["sender@dsn.example"], sender="", queue="dsn", id=queued_dsn)
        gone_off = Suppression(by_id[ids[2]].recipients[0].address, NO, at(3), ids[2])
        return [
            request(0, all_(0, RecipientState.DELIVERED)),
            request(1, all_(1, RecipientState.FAILED, dsns=(dsn,), now=at(3))),
            request(2, all_(2, RecipientState.FAILED, suppress=(gone_off,), now=at(3))),
            request(3, all_(3, RecipientState.FAILED, keep_failed=True, now=at(3))),
            request(4, all_(4, RecipientState.PENDING)),
            request(5, Completion((), next_attempt=at(7), count_attempt=False)),
            request(6, all_(6, RecipientState.DELIVERED), revision=by_id[ids[6]].revision + 1),
            request(7, all_(7, RecipientState.DELIVERED)),
            request(8, all_(8, RecipientState.FAILED, dsns=(refused,), now=at(3))),
            request(0, all_(0, RecipientState.DELIVERED)),
            request(4, all_(4, RecipientState.PENDING)),
        ]

    async def run(batched: bool) -> tuple[list[Any], dict[str, Any]]:
        prefix = unique_prefix()
        store = RedisStore({"url": redis_url, "key_prefix": prefix})
        try:
            await store.aadd_many(items(), now=T0)
            claimed = await store.aclaim(owner="w", now=at(1), lease_expires=at(60), limit=9)
            assert {i.id for i in claimed} == set(ids)
            await store.acancel(ids[7])
            asked = requests(claimed)
            if batched:
                answers = await store.acomplete_many(asked)
            else:
                answers = [(await store.acomplete_many([request]))[0] for request in asked]
            client = redis.Redis.from_url(redis_url)
            dumped = _dump(client, prefix)
            client.close()
            shown = [a if not isinstance(a, QueueError) else a.code for a in answers]
            return shown, dumped
        finally:
            await store.aclose()
            delete_prefix(redis_url, prefix)

    alone, batch = await run(batched=False), await run(batched=True)
    assert batch[0] == alone[0]
    assert [type(a) for a in batch[0]] == [QueueItem] * 6 + [Code, type(None), Code, type(None), Code]
    assert batch[1] == alone[1]
