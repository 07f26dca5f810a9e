"""The contract on traffic shaping: token buckets shared by every worker, suspensions, deferring a destination."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from ...core.errors import Code, QueueError
from ...core.items import Completion, RecipientState, Reply
from ...core.shaping import FORGET_AFTER, Window
from ...stores.base import QueueStore
from .support import LATER, OK, T0, ContractBase, at, new_item, outcome

THROTTLED = Reply(421, "4.7.0", "Try again later, closing connection")
#: what a worker records for a destination where no server could be reached
UNREACHABLE = Reply(None, "4.4.1", "no answer from any server of example.org — connection timed out")


class Shaping(ContractBase):
    """`take_tokens`, `suspend`, `suspensions`, `clear_suspension`, `take_probe`, `end_probe`, `defer_destination`."""

    # --- token buckets ------------------------------------------------------------------

    def test_a_new_bucket_is_full_and_gives_whole_tokens_until_empty(self, store: QueueStore) -> None:
        take = store.take_tokens
        assert take("relay:smtp.example.net:587", rate=1, burst=5, want=3, now=T0) == 3
        assert take("relay:smtp.example.net:587", rate=1, burst=5, want=3, now=T0) == 2
        assert take("relay:smtp.example.net:587", rate=1, burst=5, want=3, now=T0) == 0
        assert take("other.example", rate=1, burst=5, want=0, now=T0) == 0
        assert take("other.example", rate=1, burst=5, want=9, now=T0) == 5  # a key of its own, untouched by want=0

    def test_a_bucket_refills_at_its_rate_up_to_its_burst(self, store: QueueStore) -> None:
        key = ".google.com"
        assert store.take_tokens(key, rate=2, burst=10, want=10, now=T0) == 10
        assert store.take_tokens(key, rate=2, burst=10, want=10, now=at(1.5)) == 3
        assert store.take_tokens(key, rate=2, burst=10, want=10, now=at(1.75)) == 0  # 0.5 left over + 0.5
        assert store.take_tokens(key, rate=2, burst=10, want=10, now=at(2)) == 1  # the fractions add up
        assert store.take_tokens(key, rate=2, burst=10, want=100, now=at(3600)) == 10  # never past the burst

    def test_a_slow_rate_gathers_a_token_over_seconds(self, store: QueueStore) -> None:
        key = "relay:daily.example:25"
        assert store.take_tokens(key, rate=1 / 60, burst=1, want=1, now=T0) == 1
        assert store.take_tokens(key, rate=1 / 60, burst=1, want=1, now=at(59)) == 0
        assert store.take_tokens(key, rate=1 / 60, burst=1, want=1, now=at(60)) == 1

    def test_a_clock_behind_the_bucket_refills_nothing(self, store: QueueStore) -> None:
        key = "example.org"
        assert store.take_tokens(key, rate=1, burst=4, want=4, now=at(100)) == 4
        assert store.take_tokens(key, rate=1, burst=4, want=4, now=at(50)) == 0  # another machine, behind
        assert store.take_tokens(key, rate=1, burst=4, want=4, now=at(101)) == 1

    def test_concurrent_takers_never_get_more_than_the_bucket_holds(self, store: QueueStore) -> None:
        def drain(index: int) -> int:
            got = 0
            while taken := store.take_tokens("shared", rate=0.001, burst=120, want=1 + index % 3, now=T0):
                got += taken
            return got

        assert sum(self.in_threads(6, drain)) == 120

    def test_concurrent_takers_over_time_stay_within_rate_and_burst(self, store: QueueStore) -> None:
        steps = 40  # each thread takes at T0, T0 + 25 ms, ... T0 + 975 ms

        def take_over_a_second(index: int) -> int:
            return sum(
                store.take_tokens("paced", rate=20, burst=5, want=2, now=at(step / steps)) for step in range(steps)
            )

        taken = sum(self.in_threads(4, take_over_a_second))
        assert 5 <= taken <= 5 + 20  # the burst, and what one second refills

    def test_a_bad_bucket_is_refused(self, store: QueueStore) -> None:
        for key, rate, burst, want in [
            ("", 1, 1, 1),
            ("k", 0, 1, 1),
            ("k", 1, 0, 1),
            ("k", 1, 1, -1),
            ("a\nb", 1, 1, 1),
        ]:
            with pytest.raises(QueueError) as caught:
                store.take_tokens(key, rate=rate, burst=burst, want=want, now=T0)
            assert caught.value.code is Code.INVALID

    # --- a rate's window (the store's own clock) ---------------------------------------------

    @staticmethod
    def window(cap: int, *, period: float = 60, expire: float = 60) -> Window:
        return Window(cap, round(period * 1e6), round(expire * 1e6))

    def test_a_window_grants_up_to_its_cap(self, store: QueueStore) -> None:
        def take(want: int) -> int:
            return store.take_tokens(
                "relay:w.example:25", rate=1000, burst=100, want=want, now=T0, window=self.window(5)
            )

        assert [take(3), take(3), take(3)] == [3, 2, 0]
        assert store.take_tokens("other.example", rate=1000, burst=2, want=9, now=T0, window=self.window(5)) == 2

    def test_tokens_done_count_for_a_period_then_free_the_window(self, store: QueueStore) -> None:
        key = "relay:w.example:25"

        def take(want: int, done: int = 0, period: float = 60, expire: float = 60) -> int:
            window = self.window(3, period=period, expire=expire)
            return store.take_tokens(key, rate=1000, burst=100, want=want, now=T0, window=window, done=done)

        assert take(3) == 3
        assert take(1, done=2) == 0  # done within the period: still counted
        time.sleep(0.25)
        assert take(3, period=0.2) == 2  # the two done are forgotten, the one in flight stays past the period
        assert take(3, done=9, period=0.2) == 0  # reported now (more than in flight: those in flight): counted
        time.sleep(0.25)
        assert take(3, period=0.2) == 3

    def test_a_report_alone_takes_nothing(self, store: QueueStore) -> None:
        key = "relay:w.example:25"

        def take(want: int, done: int = 0, period: float = 60) -> int:
            window = self.window(2, period=period)
            return store.take_tokens(key, rate=1000, burst=100, want=want, now=T0, window=window, done=done)

        assert take(2) == 2
        assert take(0, done=2) == 0
        time.sleep(0.25)
        assert take(2, period=0.2) == 2

    def test_tokens_done_are_dated_when_they_ended(self, store: QueueStore) -> None:
        key = "relay:w.example:25"

        def take(want: int, done: int = 0, ended: float = 0.0) -> int:
            window = self.window(3)
            return store.take_tokens(
                key, rate=1000, burst=100, want=want, now=T0, window=window, done=done, ended=ended
            )

        assert take(3) == 3
        assert take(0, done=2, ended=59) == 0  # ended 59 s ago: within the 60 s period
        assert take(3, done=1, ended=120) == 1  # ended two minutes ago: out of the period at once

    def test_tokens_in_flight_expire(self, store: QueueStore) -> None:
        key = "relay:w.example:25"

        def take(expire: float = 60) -> int:
            window = self.window(2, expire=expire)
            return store.take_tokens(key, rate=1000, burst=100, want=2, now=T0, window=window)

        assert take() == 2
        time.sleep(0.25)
        assert take() == 0
        assert take(expire=0.2) == 2  # a worker that died: its tokens are forgotten

    def test_a_window_and_the_bucket_share_a_key(self, store: QueueStore) -> None:
        key = "relay:w.example:25"
        window = self.window(10)
        assert store.take_tokens(key, rate=0.001, burst=5, want=2, now=T0, window=window) == 2
        assert store.take_tokens(key, rate=0.001, burst=5, want=5, now=T0) == 3  # the bucket as the window left it
        assert store.take_tokens(key, rate=0.001, burst=5, want=5, now=T0, window=window) == 0

    def test_concurrent_takers_never_pass_the_window(self, store: QueueStore) -> None:
        def drain(index: int) -> int:
            got = 0
            window = self.window(17)
            while taken := store.take_tokens(
                "shared", rate=1000, burst=1000, want=1 + index % 3, now=T0, window=window
            ):
                got += taken
            return got

        assert sum(self.in_threads(6, drain)) == 17

    def test_a_bad_window_is_refused(self, store: QueueStore) -> None:
        for window, done, ended in [
            (Window(0, 1, 1), 0, 0.0),
            (Window(1, 0, 1), 0, 0.0),
            (Window(1, 1, 1), -1, 0.0),
            (Window(1, 1, 1), 1, -1.0),
        ]:
            with pytest.raises(QueueError) as caught:
                store.take_tokens("k", rate=1, burst=1, want=1, now=T0, window=window, done=done, ended=ended)
            assert caught.value.code is Code.INVALID

    # --- suspensions ----------------------------------------------------------------------

    def test_a_first_suspension_has_one_strike(self, store: QueueStore) -> None:
        kept = store.suspend("example.org", until=at(60), reply=THROTTLED, now=T0)
        assert (kept.destination, kept.until, kept.reply, kept.since, kept.strikes) == (
            "example.org",
            at(60),
            THROTTLED,
            T0,
            1,
        )
        assert store.suspensions(now=T0) == [kept]

    def test_strikes_add_up_while_it_keeps_happening(self, store: QueueStore) -> None:
        store.suspend(".google.com", until=at(60), reply=THROTTLED, now=T0)
        # while it is in force, another suspension is the same episode: one strike, the later until
        same = store.suspend(".google.com", until=at(30), reply=LATER, now=at(10))
        assert (same.strikes, same.until, same.since, same.reply) == (1, at(60), T0, LATER)
        # past its until, the record is kept: the next suspension is a second strike
        second = store.suspend(".google.com", until=at(180), reply=THROTTLED, now=at(60))
        assert (second.strikes, second.until, second.since) == (2, at(180), T0)
        third = store.suspend(".google.com", until=at(300), reply=THROTTLED, now=at(200))
        assert (third.strikes, third.until, third.since) == (3, at(300), T0)
        assert store.suspensions(now=at(200)) == [third]

    def test_a_suspension_sent_again_records_the_same(self, store: QueueStore) -> None:
        """A store that sends a call again after a lost answer (Redis through a failover) needs no marker for
        `suspend`: the same call once more — its `until` after its `now`, as every worker's — is the same
        episode, with the same record and strikes, a first suspension or a later one."""
        first = store.suspend("example.org", until=at(60), reply=THROTTLED, now=T0)
        assert store.suspend("example.org", until=at(60), reply=THROTTLED, now=T0) == first
        second = store.suspend("example.org", until=at(180), reply=LATER, now=at(90))
        assert store.suspend("example.org", until=at(180), reply=LATER, now=at(90)) == second
        assert (first.strikes, second.strikes) == (1, 2)
        assert store.suspensions(now=at(90)) == [second]

    def test_a_record_long_past_its_until_is_forgotten(self, store: QueueStore) -> None:
        store.suspend("example.org", until=at(60), reply=THROTTLED, now=T0)
        store.suspend("example.org", until=at(120), reply=THROTTLED, now=at(60))
        later = at(120) + FORGET_AFTER
        fresh = store.suspend("example.org", until=later + timedelta(seconds=60), reply=THROTTLED, now=later)
        assert (fresh.strikes, fresh.since) == (1, later)

    def test_only_suspensions_in_force_are_listed(self, store: QueueStore) -> None:
        a = store.suspend("a.example", until=at(60), reply=THROTTLED, now=T0)
        b = store.suspend("b.example", until=at(120), reply=UNREACHABLE, now=T0)
        c = store.suspend("relay:smtp.example.net:587", until=at(30), reply=THROTTLED, now=T0)
        assert store.suspensions(now=T0) == [a, b, c]
        assert store.suspensions(now=at(30)) == [a, b]  # until is the first moment it is over
        assert store.suspensions(now=at(60)) == [b]
        assert store.suspensions(now=T0, destinations=["b.example", "relay:smtp.example.net:587", "z.example"]) == [
            b,
            c,
        ]
        assert store.suspensions(now=T0, destinations=[]) == []
        assert store.suspensions(now=at(120)) == []

    def test_a_reply_without_a_code_and_with_any_text_is_kept(self, store: QueueStore) -> None:
        odd = Reply(None, "", "Zeitüberschreitung — 接続 \U0001f4e8 ' \" \\ %s")
        store.suspend("dead.example", until=at(60), reply=odd, now=T0)
        (kept,) = store.suspensions(now=T0)
        assert kept.reply == odd

    def test_clearing_a_suspension_starts_the_strikes_again(self, store: QueueStore) -> None:
        store.suspend("example.org", until=at(60), reply=THROTTLED, now=T0)
        store.suspend("example.org", until=at(120), reply=THROTTLED, now=at(1))
        assert store.clear_suspension("example.org") is True
        assert store.clear_suspension("example.org") is False
        assert store.suspensions(now=at(2)) == []
        again = store.suspend("example.org", until=at(60), reply=THROTTLED, now=at(2))
        assert (again.strikes, again.since) == (1, at(2))

    def test_concurrent_suspensions_are_one_strike_with_the_latest_until(self, store: QueueStore) -> None:
        self.in_threads(6, lambda i: store.suspend("busy.example", until=at(60 + i), reply=THROTTLED, now=T0))
        (kept,) = store.suspensions(now=T0)
        assert (kept.strikes, kept.until) == (1, at(65))
        # after it ended, as many at once are one strike more
        self.in_threads(6, lambda i: store.suspend("busy.example", until=at(200 + i), reply=THROTTLED, now=at(70)))
        (kept,) = store.suspensions(now=at(70))
        assert (kept.strikes, kept.until) == (2, at(205))

    def test_a_bad_suspension_is_refused(self, store: QueueStore) -> None:
        for destination, reply in [("", THROTTLED), ("x" * 301, THROTTLED), ("ok.example", Reply(421, "", "a\x00b"))]:
            with pytest.raises(QueueError) as caught:
                store.suspend(destination, until=at(60), reply=reply, now=T0)
            assert caught.value.code is Code.INVALID
        assert store.suspensions(now=T0) == []

    @pytest.mark.asyncio
    async def test_the_async_twins_shape_the_same(self, store: QueueStore) -> None:
        try:
            assert await store.atake_tokens("k", rate=1, burst=2, want=5, now=T0) == 2
            kept = await store.asuspend("example.org", until=at(60), reply=THROTTLED, now=T0)
            assert await store.asuspensions(now=T0, destinations=["example.org"]) == [kept]
            item = await store.aadd(new_item(["a@example.org"]), now=T0)
            assert await store.adefer_destination(["example.org"], until=at(60), now=T0) == 1
            moved = await store.aget(item.id)
            assert moved is not None and moved.next_attempt == at(60)
            assert await store.aclear_suspension("example.org") is True
        finally:
            await store.aclose()

    # --- probes (slow start) ---------------------------------------------------------------------

    def test_one_holder_takes_a_probe_and_others_wait_for_its_end(self, store: QueueStore) -> None:
        assert store.take_probe("cold.example", holder="a", until=at(30), now=T0) is None
        assert store.take_probe("cold.example", holder="b", until=at(40), now=at(1)) == at(30)
        assert store.take_probe("cold.example", holder="a", until=at(45), now=at(2)) is None  # renewed
        assert store.take_probe("cold.example", holder="b", until=at(50), now=at(30)) == at(45)
        assert store.take_probe("other.example", holder="b", until=at(50), now=at(30)) is None  # a key of its own
        # a holder that died: its probe ends at its until
        assert store.take_probe("cold.example", holder="b", until=at(75), now=at(45)) is None
        assert store.take_probe("cold.example", holder="a", until=at(80), now=at(46)) == at(75)

    def test_a_probe_ended_by_its_holder_is_free_at_once(self, store: QueueStore) -> None:
        assert store.take_probe("cold.example", holder="a", until=at(30), now=T0) is None
        assert store.end_probe("cold.example", holder="b") is False
        assert store.end_probe("cold.example", holder="a") is True
        assert store.end_probe("cold.example", holder="a") is False
        assert store.take_probe("cold.example", holder="b", until=at(31), now=at(1)) is None
        assert store.end_probe("nothing.example", holder="b") is False

    def test_a_suspension_refuses_the_probe_and_ends_one_in_the_same_write(self, store: QueueStore) -> None:
        assert store.take_probe("busy.example", holder="a", until=at(300), now=T0) is None
        kept = store.suspend("busy.example", until=at(60), reply=THROTTLED, now=at(1))
        assert store.take_probe("busy.example", holder="b", until=at(90), now=at(2)) == kept
        assert store.take_probe("busy.example", holder="a", until=at(90), now=at(2)) == kept  # its holder too
        assert store.end_probe("busy.example", holder="a") is False  # the suspension ended it
        # at the suspension's end the probe is free, though the ended one's until (300) has not come
        assert store.take_probe("busy.example", holder="b", until=at(90), now=at(60)) is None
        assert store.suspensions(now=at(60)) == []

    def test_a_probe_is_no_suspension_and_keeps_the_strikes(self, store: QueueStore) -> None:
        assert store.take_probe("cold.example", holder="a", until=at(30), now=T0) is None
        assert store.suspensions(now=T0) == []
        first = store.suspend("cold.example", until=at(60), reply=THROTTLED, now=at(1))
        assert (first.strikes, first.since) == (1, at(1))
        assert store.take_probe("cold.example", holder="b", until=at(90), now=at(60)) is None
        assert store.end_probe("cold.example", holder="b") is True
        second = store.suspend("cold.example", until=at(180), reply=THROTTLED, now=at(61))
        assert (second.strikes, second.since) == (2, at(1))  # a probe between them is no success
        assert store.suspensions(now=at(61)) == [second]

    def test_of_concurrent_takers_one_gets_the_probe(self, store: QueueStore) -> None:
        got = self.in_threads(8, lambda i: store.take_probe("cold.example", holder=f"h{i}", until=at(30), now=T0))
        assert sum(1 for g in got if g is None) == 1
        assert [g for g in got if g is not None] == [at(30)] * 7

    def test_a_bad_probe_is_refused(self, store: QueueStore) -> None:
        bad = [("", "a"), ("x" * 301, "a"), ("ok.example", ""), ("ok.example", "a\x00b"), ("ok.example", "h" * 65)]
        for destination, holder in bad:
            with pytest.raises(QueueError) as caught:
                store.take_probe(destination, holder=holder, until=at(30), now=T0)
            assert caught.value.code is Code.INVALID
        assert store.take_probe("ok.example", holder="a", until=at(30), now=T0) is None

    @pytest.mark.asyncio
    async def test_the_async_twins_probe_the_same(self, store: QueueStore) -> None:
        try:
            assert await store.atake_probe("cold.example", holder="a", until=at(30), now=T0) is None
            assert await store.atake_probe("cold.example", holder="b", until=at(30), now=T0) == at(30)
            assert await store.aend_probe("cold.example", holder="a") is True
            assert await store.atake_probe("cold.example", holder="b", until=at(30), now=T0) is None
        finally:
            await store.aclose()

    # --- deferring a destination's items --------------------------------------------------------

    def test_defer_destination_moves_only_items_wholly_for_it(self, store: QueueStore) -> None:
        only = store.add(new_item(["a@x.example", "b@X.example"]), now=T0)
        mixed = store.add(new_item(["a@x.example", "c@y.example"]), now=T0)
        elsewhere = store.add(new_item(["c@y.example"]), now=T0)
        later = store.add(new_item(["d@x.example"], not_before=at(900)), now=T0)
        scheduled = store.add(new_item(["e@x.example"], not_before=at(100)), now=T0)
        rollup = store.add(new_item(["f@z.example"]), now=T0)  # another domain of the same site
        moved = store.defer_destination(["x.example", "z.example"], until=at(600), now=at(5))
        assert moved == 3
        for item, due in [
            (only, at(600)),
            (mixed, T0),
            (elsewhere, T0),
            (later, at(900)),
            (scheduled, at(600)),
            (rollup, at(600)),
        ]:
            now = store.get(item.id)
            assert now is not None and now.next_attempt == due, item.recipients

    def test_defer_destination_counts_no_attempt_and_keeps_the_replies(self, store: QueueStore) -> None:
        store.add_many([new_item(["a@x.example", "b@y.example"]), new_item(["c@x.example"])], now=T0)
        first, second = store.claim(owner="w", now=T0, lease_expires=at(60), limit=2)
        # the first item's y.example recipient is delivered: what is left pending is all at x.example
        done = store.complete(
            first.id,
            owner="w",
            revision=first.revision,
            completion=Completion(
                (
                    outcome("a@x.example", RecipientState.PENDING, LATER),
                    outcome("b@y.example", RecipientState.DELIVERED),
                ),
                next_attempt=at(10),
            ),
        )
        deferred = store.complete(
            second.id,
            owner="w",
            revision=second.revision,
            completion=Completion((outcome("c@x.example", RecipientState.PENDING, THROTTLED),), next_attempt=at(10)),
        )
        assert done is not None and deferred is not None
        assert store.defer_destination(["x.example"], until=at(600), now=at(5)) == 2
        for before in (done, deferred):
            after = store.get(before.id)
            assert after is not None
            assert after.next_attempt == at(600) and after.attempts == before.attempts == 1
            assert after.recipients == before.recipients and after.delay_warned == before.delay_warned
            assert after.revision > before.revision and after.owner is None

    def test_defer_destination_leaves_a_leased_item_to_its_worker(self, store: QueueStore) -> None:
        leased = store.add(new_item(["a@x.example"]), now=T0)
        expired = store.add(new_item(["b@x.example"]), now=T0)
        held = {i.id: i for i in store.claim(owner="w", now=T0, lease_expires=at(60), limit=2)}
        assert store.renew([leased.id], owner="w", lease_expires=at(600)) == [leased.id]
        assert store.defer_destination(["x.example"], until=at(900), now=at(100)) == 1  # the expired lease's item
        kept = store.get(leased.id)
        assert kept is not None and kept.next_attempt == T0 and kept.revision == held[leased.id].revision
        moved = store.get(expired.id)
        assert moved is not None and moved.next_attempt == at(900)

    def test_defer_destination_of_nothing_moves_nothing(self, store: QueueStore) -> None:
        item = store.add(new_item(["a@x.example"]), now=T0)
        assert store.defer_destination([], until=at(600), now=T0) == 0
        assert store.defer_destination(["nowhere.example"], until=at(600), now=T0) == 0
        assert store.defer_destination(["x.example"], until=T0, now=T0) == 0  # not before until already
        assert store.get(item.id) == item

    def test_a_deferred_item_is_claimed_when_the_suspension_ends(self, store: QueueStore) -> None:
        item = store.add(new_item(["a@x.example"]), now=T0)
        store.defer_destination(["x.example"], until=at(600), now=T0)
        assert store.claim(owner="w", now=at(599), lease_expires=at(700)) == []
        (claimed,) = store.claim(owner="w", now=at(600), lease_expires=at(700))
        assert claimed.id == item.id and claimed.attempts == 0 and claimed.reclaims == 0
        assert store.complete(
            claimed.id,
            owner="w",
            revision=claimed.revision,
            completion=Completion((outcome("a@x.example", RecipientState.DELIVERED, OK),), next_attempt=at(600)),
        )
