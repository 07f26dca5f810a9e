"""Slow start: the decision before a new connection (pure), and the probe shared by two workers' shapers."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from django_mailqueue.conf import load_settings
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import Reply
from django_mailqueue.core.shaping import Suspension
from django_mailqueue.delivery import replies
from django_mailqueue.delivery.destinations import DestinationReport, unreachable
from django_mailqueue.shaping import probe_seconds
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.worker.probing import (
    HEALTHY_FOR,
    PROBE_RECHECK,
    PROBE_RECHECK_MAX,
    Probes,
    Step,
    next_step,
    probe_hold,
    recheck_after,
)
from django_mailqueue.worker.shaper import Shaper

THROTTLED = Reply(421, "4.7.0", "Try again later, closing connection")

# --- the decision ------------------------------------------------------------------------------


def test_a_destination_never_seen_is_asked_for_and_one_led_here_is_waited_for() -> None:
    assert next_step(healthy_until=None, leader=None, holder="a", now=10.0) is Step.ASK
    assert next_step(healthy_until=None, leader="a", holder="b", now=10.0) is Step.WAIT
    assert next_step(healthy_until=5.0, leader="a", holder="b", now=10.0) is Step.WAIT  # healthy no more


def test_a_healthy_destination_goes_and_the_leader_renews_its_own_probe() -> None:
    assert next_step(healthy_until=10.5, leader=None, holder="a", now=10.0) is Step.GO
    assert next_step(healthy_until=10.0, leader=None, holder="a", now=10.0) is Step.ASK  # until: the first moment past
    assert next_step(healthy_until=None, leader="a", holder="a", now=10.0) is Step.ASK  # its next MX host


def test_rechecks_start_soon_and_slow_down_to_a_bound() -> None:
    waits = [recheck_after(n) for n in range(1, 10)]
    assert waits[0] == PROBE_RECHECK and waits == sorted(waits) and waits[-1] == PROBE_RECHECK_MAX
    assert recheck_after(0) == PROBE_RECHECK


def test_a_probe_holds_for_a_sessions_opening_at_most() -> None:
    assert probe_seconds(30, 300) == 630
    assert probe_seconds(2, 2) == 6


def test_a_probe_holds_no_longer_than_a_lease_and_is_renewed_meanwhile() -> None:
    assert probe_hold(6, 300) == (6, None)  # within a lease: taken once
    assert probe_hold(630, 300) == (300, 150)  # a dead holder's probe ends like its leases
    assert probe_hold(150, 2) == (2, 1)


def test_only_hosts_that_could_not_be_reached_make_a_dead_attempt() -> None:
    assert unreachable([True, True]) and not unreachable([]) and not unreachable([True, False])


def test_a_session_accepted_makes_the_destination_healthy_for_a_while_and_ends_the_lead() -> None:
    probes = Probes()
    lead = probes.lead("a.test", "h1")
    lead.taken = True
    assert probes.cold("a.test", 1.0) and probes.step("a.test", "h2", 1.0) is Step.WAIT
    assert probes.accepted("a.test", "h1", 1.0) is True  # it held the store's probe: the caller ends it
    assert lead.done.is_set() and not probes.cold("a.test", 1.0)
    assert probes.step("a.test", "h2", 1.0 + HEALTHY_FOR - 1) is Step.GO
    assert probes.step("a.test", "h2", 1.0 + HEALTHY_FOR) is Step.ASK
    assert probes.accepted("a.test", "h2", 2.0) is False  # no lead: nothing to end
    probes.suspended("a.test")
    assert probes.step("a.test", "h2", 3.0) is Step.ASK  # after a suspension the next connection probes again


def test_only_the_leader_ends_its_lead() -> None:
    probes = Probes()
    probes.lead("a.test", "h1")
    assert probes.end("a.test", "h2") is False and probes.cold("a.test", 0.0)
    assert probes.leads("h1") == ["a.test"] and probes.end("a.test", "h1") is False  # led, never taken
    assert not probes.cold("a.test", 0.0)


# --- two workers' shapers on one store ----------------------------------------------------------


def shaper(store: MemoryStore, **mailqueue: object) -> Shaper:
    settings = load_settings(
        {"STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"}, "ROUTES": {"*": "mx"}, **mailqueue}
    )
    return Shaper(settings, store, clock=SystemClock())


def taken_by_another(store: MemoryStore, key: str) -> bool:
    now = SystemClock().now()
    return store.take_probe(key, holder="another", until=now + timedelta(seconds=60), now=now) is None


async def test_a_probe_is_renewed_while_its_session_opens_and_expires_a_lease_after_its_holder_stops() -> None:
    store = MemoryStore()
    one = shaper(store, LEASE=1)
    deadline = asyncio.get_running_loop().time() + 30
    try:
        assert await one.connect("slow.test", "w1-1", seconds=60, deadline=deadline) is None
        await asyncio.sleep(2.5)  # past its first lease: renewed meanwhile
        assert not taken_by_another(store, "slow.test")
        one.left("w1-1")  # as if it died: nobody ends or renews the probe
        await asyncio.sleep(1.5)
        assert taken_by_another(store, "slow.test")  # expired after a lease, not after 60 s
    finally:
        await one.aclose()


@pytest.mark.parametrize(
    ("reply", "dead"),
    [
        (replies.own_reply(replies.TLS_FAILED, "TLS handshake with mx failed"), False),
        (Reply(450, "4.3.2", "Not now"), False),
        (replies.own_reply(replies.NO_ANSWER, "no greeting from mx within 2 s"), True),
    ],
)
async def test_a_probe_that_reached_a_server_ends_and_one_that_reached_none_suspends(reply: Reply, dead: bool) -> None:
    store = MemoryStore()
    one = shaper(store)
    deadline = asyncio.get_running_loop().time() + 30
    try:
        assert await one.connect("mx.test", "w1-1", seconds=60, deadline=deadline) is None
        one.left("w1-1")
        policy = one.settings.shaping.mx_policy("mx.test", ["mx.mx.test"], concurrency=20)
        made = await one.observe([DestinationReport(policy, "mx.test", (reply,), unreachable=dead, holder="w1-1")])
        assert bool(made) is dead
        if not dead:  # an ordinary outcome: the probe ended, the next attempt may probe again
            assert taken_by_another(store, policy.key)
    finally:
        await one.aclose()


async def test_one_worker_probes_the_others_wait_and_go_once_it_was_accepted() -> None:
    store = MemoryStore()
    first, second = shaper(store), shaper(store)
    deadline = asyncio.get_running_loop().time() + 30
    try:
        assert await first.connect("a.test", "w1-1", seconds=60, deadline=deadline) is None  # the probe
        waiting = [
            asyncio.create_task(first.connect("a.test", "w1-2", seconds=60, deadline=deadline)),  # same worker
            asyncio.create_task(second.connect("a.test", "w2-1", seconds=60, deadline=deadline)),  # another
        ]
        await asyncio.sleep(0.2)
        assert not any(task.done() for task in waiting)
        first.accepted("a.test", "w1-1")
        assert await asyncio.wait_for(asyncio.gather(*waiting), 10) == [None, None]
        # the second worker took the store's probe in its turn (then ended it too), the first goes at once
        second.accepted("a.test", "w2-1")
        assert await first.connect("a.test", "w1-3", seconds=60, deadline=deadline) is None
    finally:
        await first.aclose()
        await second.aclose()
    assert (
        store.take_probe(
            "a.test", holder="x", until=SystemClock().now() + timedelta(seconds=5), now=SystemClock().now()
        )
        is None
    )


async def test_a_probe_that_met_a_421_turns_into_the_suspension_the_waiters_find() -> None:
    store = MemoryStore()
    first, second = shaper(store), shaper(store)
    deadline = asyncio.get_running_loop().time() + 30
    try:
        assert await first.connect("busy.test", "w1-1", seconds=60, deadline=deadline) is None
        here = asyncio.create_task(first.connect("busy.test", "w1-2", seconds=60, deadline=deadline))
        there = asyncio.create_task(second.connect("busy.test", "w2-1", seconds=60, deadline=deadline))
        await asyncio.sleep(0.2)
        first.left("w1-1")  # the attempt's sessions are over: the 421's suspension is recorded next
        await asyncio.sleep(0.2)
        assert not here.done() and not there.done()  # the store's probe still holds them
        now = SystemClock().now()
        kept = store.suspend("busy.test", until=now + timedelta(seconds=60), reply=THROTTLED, now=now)
        found = await asyncio.wait_for(asyncio.gather(here, there), 10)
        assert found == [kept, kept] and all(isinstance(s, Suspension) for s in found)
        assert second.suspended("busy.test") == kept
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_waiter_gives_up_at_its_deadline_and_a_dead_holders_probe_expires() -> None:
    store = MemoryStore()
    now = SystemClock().now()
    assert store.take_probe("hole.test", holder="dead", until=now + timedelta(seconds=0.5), now=now) is None
    one = shaper(store)
    loop = asyncio.get_running_loop()
    try:
        assert await one.connect("hole.test", "w1-1", seconds=60, deadline=loop.time() + 0.1) is None
        assert not one.probes.cold("hole.test", loop.time())  # its lead ended with the wait
        assert await one.connect("hole.test", "w1-2", seconds=60, deadline=loop.time() + 30) is None  # taken
        later = SystemClock().now()
        assert store.take_probe("hole.test", holder="x", until=later, now=later) is not None  # w1-2 holds it
    finally:
        await one.aclose()


@pytest.mark.parametrize("suspended_first", [True, False])
async def test_a_suspension_in_the_view_is_answered_without_a_probe(suspended_first: bool) -> None:
    store = MemoryStore()
    one = shaper(store)
    now = SystemClock().now()
    kept = store.suspend("busy.test", until=now + timedelta(seconds=60), reply=THROTTLED, now=now)
    deadline = asyncio.get_running_loop().time() + 30
    try:
        if suspended_first:
            await one.refresh()
        assert await one.connect("busy.test", "w1-1", seconds=60, deadline=deadline) == kept
        assert not one.probes.cold("busy.test", 0.0)
    finally:
        await one.aclose()
