"""The worker's shaper on the memory store, without a network: admission, tokens, suspensions, strikes, dead sites."""

from __future__ import annotations

import asyncio
import signal
from datetime import timedelta
from typing import Any

import pytest

from django_mailqueue.conf import load_settings
from django_mailqueue.core.clock import FakeClock
from django_mailqueue.core.items import NewItem, QueueItem, Reply
from django_mailqueue.delivery import replies
from django_mailqueue.delivery.destinations import DestinationReport
from django_mailqueue.shaping import DestinationPolicy
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.worker.shaper import Hold, Shaper, Ticket, Wait

THROTTLED = Reply(421, "4.7.0", "Try again later, closing connection.")
DELIVERED = Reply(250, "2.0.0", "OK")
NO_GREETING = Reply(None, replies.NO_ANSWER, "no greeting from mx.hole.test[192.0.2.1]:25 within 30 s")


def shaper(store: MemoryStore, clock: FakeClock, **mailqueue: Any) -> Shaper:
    settings = load_settings({"ROUTES": {"*": "mx"}, "CONCURRENCY": 20, **mailqueue})
    return Shaper(settings, store, clock=clock)


def item(store: MemoryStore, clock: FakeClock, *recipients: str) -> QueueItem:
    return store.add(NewItem("s@origin.test", tuple(recipients), b"Subject: x\r\n\r\nx\r\n"), now=clock.now())


def policy_of(shaper_: Shaper, domain: str) -> DestinationPolicy:
    return shaper_.settings.shaping.mx_policy(domain, [f"mx.{domain}"], concurrency=20)


async def test_a_destination_at_its_connection_limit_waits_and_its_slot_comes_back() -> None:
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock, SHAPING={"a.test": {"CONNECTIONS": 2}})
    first, second, third = (s.admit(item(store, clock, f"u{n}@a.test")) for n in range(3))
    assert isinstance(first, Ticket) and isinstance(second, Ticket)
    assert isinstance(third, Wait) and third.policy.key == "a.test"
    assert isinstance(s.admit(item(store, clock, "u@b.test")), Ticket)  # another destination goes
    s.release(first)
    assert isinstance(s.admit(item(store, clock, "u9@a.test")), Ticket)


async def test_a_rate_admits_what_the_store_s_bucket_gives_a_few_tokens_at_a_time() -> None:
    store, clock = MemoryStore(), FakeClock()
    woken = asyncio.Event()
    s = shaper(store, clock, ROUTES={"*": {"HOST": "192.0.2.1", "RATE": "100/s"}})
    s.wake = woken.set
    assert isinstance(s.admit(item(store, clock, "u@a.test")), Wait)  # no token yet: one is asked for
    await asyncio.wait_for(woken.wait(), 5)
    admitted = [s.admit(item(store, clock, f"u{n}@a.test")) for n in range(6)]
    assert [type(a) for a in admitted] == [Ticket] * 5 + [Wait]  # a batch is 0.05 s of the rate: 5


async def test_a_take_that_ended_before_its_callback_ran_does_not_stall_a_wait_for_a_token() -> None:
    """A finished take still listed (its done callback not run yet) with no token left: awaiting it does not
    yield to the loop, so a wait that took it for the take under way would spin forever, the loop blocked."""
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock, ROUTES={"*": {"HOST": "192.0.2.1", "RATE": "20/s"}})
    policy = s.settings.shaping.relay_policy("192.0.2.1", 587, s.settings.routes["*"].limits)  # type: ignore[union-attr]

    async def nothing() -> None:
        return None

    ended = asyncio.get_running_loop().create_task(nothing())
    await ended
    s.tokens._refills[policy.key] = ended

    def stuck(signum: int, frame: Any) -> None:
        raise TimeoutError("the loop spun on a finished take")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.setitimer(signal.ITIMER_REAL, 10)
    try:
        await asyncio.wait_for(s.tokens.token(policy), 5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


async def test_a_421_suspends_for_every_worker_and_a_second_worker_adopts_it() -> None:
    store, clock = MemoryStore(), FakeClock()
    one, two = shaper(store, clock), shaper(store, clock)
    policy = policy_of(one, "a.test")
    one.learn("a.test", policy)
    waiting = item(store, clock, "w@a.test")
    (made,) = await one.observe([DestinationReport(policy, "a.test", (THROTTLED,))])
    assert made.destination == "a.test" and made.strikes == 1
    assert made.until == clock.now() + timedelta(seconds=60)
    assert store.get(waiting.id).next_attempt == made.until  # type: ignore[union-attr]
    assert store.get(waiting.id).attempts == 0  # type: ignore[union-attr]
    assert await two.observe([DestinationReport(policy, "a.test", (THROTTLED,))]) == []  # one event, one strike
    assert store.suspensions(now=clock.now())[0].strikes == 1
    held = two.admit(item(store, clock, "x@a.test"))
    assert isinstance(held, Hold) and held.suspension.until == made.until


async def test_a_suspension_doubles_while_it_keeps_happening_and_a_success_after_it_clears_it() -> None:
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock, SHAPING={"*": {"SUSPEND": 60, "SUSPEND_MAX": 200}})
    policy = policy_of(s, "a.test")
    throttled = DestinationReport(policy, "a.test", (THROTTLED,))
    durations = []
    for _ in range(4):
        (made,) = await s.observe([throttled])
        durations.append((made.until - clock.now()).total_seconds())
        clock.advance(durations[-1] + 1)
    assert durations == [60, 120, 200, 200]
    (made,) = await s.observe([throttled])
    await s.observe([DestinationReport(policy, "a.test", (DELIVERED,), delivered=True)])
    assert store.suspensions(now=clock.now()) != []  # a session begun before the suspension does not lift it
    clock.advance(201)
    await s.observe([DestinationReport(policy, "a.test", (DELIVERED,), delivered=True)])
    (made,) = await s.observe([throttled])
    assert made.strikes == 1 and (made.until - clock.now()).total_seconds() == 60


@pytest.mark.parametrize(
    ("reply", "suspended"), [(Reply(451, "4.7.650", "rate limited"), True), (Reply(451, "4.7.1", "Greylisted"), False)]
)
async def test_a_throttling_rule_suspends_and_other_replies_do_not(reply: Reply, suspended: bool) -> None:
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock)
    made = await s.observe([DestinationReport(policy_of(s, "a.test"), "a.test", (reply,))])
    assert bool(made) is suspended


async def test_a_destination_no_attempt_reaches_is_dead_after_dead_after_in_a_row() -> None:
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock, SHAPING={"*": {"DEAD_AFTER": 3}})
    policy = policy_of(s, "hole.test")
    unreachable = DestinationReport(policy, "hole.test", (NO_GREETING,), unreachable=True)
    assert await s.observe([unreachable]) == []
    assert await s.observe([DestinationReport(policy, "hole.test", (DELIVERED,), delivered=True)]) == []  # resets
    assert await s.observe([unreachable]) == [] and await s.observe([unreachable]) == []
    (made,) = await s.observe([unreachable])
    assert made.reply == NO_GREETING and made.reply.code is None


async def test_the_read_before_a_new_connection_is_begun_after_the_call_and_shared() -> None:
    store, clock = MemoryStore(), FakeClock()
    one, two = shaper(store, clock), shaper(store, clock)
    reads = 0
    read = store.asuspensions

    async def counted(**kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await read(**kwargs)

    store.asuspensions = counted  # type: ignore[method-assign]
    await two.refresh()  # two's view: nothing suspended
    await one.observe([DestinationReport(policy_of(one, "a.test"), "a.test", (THROTTLED,))])
    assert two.suspended("a.test") is None  # its view is older than the record
    reads = 0
    found = await asyncio.gather(*(two.current("a.test") for _ in range(5)))
    # the first caller's read, and one more for the four that asked while it was under way
    assert {f.destination if f else None for f in found} == {"a.test"} and reads == 2
    two._view_at = None  # stale: a read in the background begins
    two.refresh_soon()  # a read under way when `current` is called may have begun before a record: one more
    assert await two.current("b.test") is None and reads == 4


class CountingStore(MemoryStore):
    """A memory store that lists each take: (tokens wanted, tokens reported done)."""

    def __init__(self) -> None:
        super().__init__()
        self.takes: list[tuple[int, int]] = []

    def take_tokens(self, key: str, **kwargs: Any) -> int:
        self.takes.append((kwargs["want"], kwargs.get("done", 0)))
        return super().take_tokens(key, **kwargs)


async def test_a_rate_that_does_not_bind_costs_one_take_a_batch_and_no_report_of_its_own() -> None:
    """Issue 20, line 5: `make bench`'s `deliver.1.shaped` (`RATE "100000/s"`) must cost nothing beside the
    unshaped run, so its tokens done wait for the next take (one per 5,000 messages), never a round trip alone."""
    store, clock = CountingStore(), FakeClock()
    woken = asyncio.Event()
    s = shaper(store, clock, ROUTES={"*": {"HOST": "192.0.2.1", "RATE": "100000/s"}})
    s.wake = woken.set
    assert isinstance(s.admit(item(store, clock, "u@a.test")), Wait)
    await asyncio.wait_for(woken.wait(), 5)
    for n in range(300):  # as a worker does: admitted, delivered, the slot given back; the takes' period apart
        ticket = s.admit(item(store, clock, f"u{n}@a.test"))
        assert isinstance(ticket, Ticket)
        s.release(ticket)
        if n % 100 == 99:
            await asyncio.sleep(0.06)  # past REPORT_AFTER of the period: a report alone would have gone
    assert store.takes == [(5000, 0)]
    assert sum(s.tokens.unreported.values()) == 300  # carried by the next take
