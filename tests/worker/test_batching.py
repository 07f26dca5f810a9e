"""The worker's group commit: batches, lingering for company, errors, closing."""

from __future__ import annotations

import asyncio

import pytest

from django_mailqueue.worker.batching import Batcher


class Writer:
    def __init__(self, fail: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.fail = fail

    async def write(self, entries: list[int]) -> list[int]:
        self.batches.append(list(entries))
        await asyncio.sleep(0)
        if self.fail:
            raise RuntimeError("the store is away")
        return [e * 10 for e in entries]


async def test_each_caller_gets_its_own_answer_and_late_comers_share_the_next_batch() -> None:
    writer = Writer()
    batcher: Batcher[int, int] = Batcher(writer.write, limit=100)
    answers = await asyncio.gather(*(batcher.submit(i) for i in range(5)))
    assert answers == [0, 10, 20, 30, 40]
    # Without a linger the first entry goes at once; the rest, queued meanwhile, form one batch.
    assert sum(writer.batches, []) == list(range(5))
    assert len(writer.batches) <= 2
    await batcher.close()


async def test_while_more_are_coming_the_batch_waits_for_them() -> None:
    writer = Writer()
    coming = {"more": True}
    batcher: Batcher[int, int] = Batcher(writer.write, limit=100, linger=5.0, more_coming=lambda: coming["more"])
    first = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0.05)
    assert writer.batches == []  # lingering: others are on their way
    second = asyncio.ensure_future(batcher.submit(2))
    await asyncio.sleep(0.05)
    assert writer.batches == []
    # A full batch goes without waiting out the linger.
    rest = [asyncio.ensure_future(batcher.submit(i)) for i in range(3, 101)]
    assert await asyncio.wait_for(first, 1.0) == 10
    assert await second == 20
    await asyncio.gather(*rest)
    assert writer.batches[0] == list(range(1, 101))
    await batcher.close()


async def test_the_linger_is_bounded() -> None:
    writer = Writer()
    batcher: Batcher[int, int] = Batcher(writer.write, limit=100, linger=0.05, more_coming=lambda: True)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await batcher.submit(7) == 70
    assert 0.04 <= loop.time() - started < 2.0
    await batcher.close()


async def test_nobody_else_coming_means_no_wait() -> None:
    writer = Writer()
    batcher: Batcher[int, int] = Batcher(writer.write, limit=100, linger=30.0, more_coming=lambda: False)
    assert await asyncio.wait_for(batcher.submit(3), 1.0) == 30
    await batcher.close()


async def test_a_failed_write_reaches_every_caller_of_that_batch_and_the_next_batch_still_goes() -> None:
    writer = Writer(fail=True)
    batcher: Batcher[int, int] = Batcher(writer.write, limit=2)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    writer.fail = False
    assert await batcher.submit(4) == 40
    await batcher.close()


async def test_close_writes_what_is_queued_without_lingering() -> None:
    writer = Writer()
    batcher: Batcher[int, int] = Batcher(writer.write, limit=100, linger=30.0, more_coming=lambda: True)
    batcher.post([1, 2, 3])
    await asyncio.sleep(0.01)
    await asyncio.wait_for(batcher.close(), 2.0)
    assert sum(writer.batches, []) == [1, 2, 3]


@pytest.mark.parametrize("limit", [1, 3])
async def test_batches_never_exceed_the_limit(limit: int) -> None:
    writer = Writer()
    batcher: Batcher[int, int] = Batcher(writer.write, limit=limit, linger=0.01, more_coming=lambda: True)
    await asyncio.gather(*(batcher.submit(i) for i in range(10)))
    assert all(len(b) <= limit for b in writer.batches)
    assert sorted(sum(writer.batches, [])) == list(range(10))
    await batcher.close()


async def test_enough_entries_end_the_wait_before_the_linger() -> None:
    writer = Writer()
    batcher: Batcher[int, int] = Batcher(writer.write, limit=100, linger=30.0, more_coming=lambda: True, enough=3)
    answers = await asyncio.wait_for(asyncio.gather(*(batcher.submit(i) for i in range(3))), 1.0)
    assert answers == [0, 10, 20]
    await batcher.close()
