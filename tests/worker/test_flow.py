"""The worker's flow control on its own: slots, the byte budget, claims ahead and the hold limit."""

from __future__ import annotations

import pytest

from django_mailqueue.worker.flow import PREFETCH_FACTOR, RECORD_FILL, RECORDING_FACTOR, Flow


def test_the_prefetch_defaults_to_the_factor_of_the_concurrency() -> None:
    flow = Flow.for_concurrency(4, max_bytes=1000)
    assert flow.prefetch == PREFETCH_FACTOR * 4
    assert Flow.for_concurrency(4, max_bytes=1000, prefetch=0).prefetch == 0
    assert flow.batch_enough == RECORD_FILL * 4
    assert flow.hold_limit == (1 + RECORDING_FACTOR) * 4 + flow.prefetch


def test_an_idle_worker_claims_its_slots_and_the_prefetch() -> None:
    flow = Flow(concurrency=2, prefetch=6, max_bytes=1000)
    assert flow.room(held=0) == 8
    assert flow.room(held=8) == 0
    assert flow.claim_now(room=8, waiting=0)


def test_claims_come_in_batches_of_half_the_prefetch_while_items_wait() -> None:
    flow = Flow(concurrency=2, prefetch=6, max_bytes=1000)
    assert not flow.claim_now(room=2, waiting=4)  # one claim per finished attempt: too many round trips
    assert flow.claim_now(room=3, waiting=4)
    assert flow.claim_now(room=1, waiting=0)  # nothing left waiting: claim whatever fits
    assert not flow.claim_now(room=0, waiting=0)
    assert Flow(concurrency=1, prefetch=0, max_bytes=1).claim_now(room=1, waiting=1)


def test_slots_bound_the_attempts_delivering() -> None:
    flow = Flow(concurrency=2, prefetch=0, max_bytes=1000)
    flow.start(10)
    flow.start(10)
    assert flow.delivering == 2 and not flow.may_start(0)
    flow.end_delivery(10)
    assert flow.may_start(10) and flow.more_coming


def test_the_byte_budget_holds_but_a_larger_message_still_goes_alone() -> None:
    flow = Flow(concurrency=10, prefetch=0, max_bytes=100)
    assert flow.cost(30) == 60  # read, and written to the socket
    flow.start(60)
    assert not flow.may_start(60)
    assert flow.may_start(40)
    flow.end_delivery(60)
    assert flow.bytes_in_flight == 0
    assert flow.may_start(500)  # nothing in flight: larger than the whole budget, alone
    flow.start(500)
    assert not flow.may_start(1)


def test_outcomes_being_recorded_free_their_slot_but_count_against_the_hold_limit() -> None:
    flow = Flow(concurrency=2, prefetch=4, max_bytes=1000)
    for _ in range(2):
        flow.start(0)
    held = 6  # two delivering, four waiting
    assert flow.room(held) == 0
    for _ in range(2):
        flow.end_delivery(0)
    assert not flow.more_coming and flow.recording == 2
    assert flow.room(held) == 2  # the slots are free again
    recording = flow.hold_limit - 6
    flow.recording = recording
    assert flow.room(held + recording - 2) == 2
    assert flow.room(flow.hold_limit) == 0  # a slow store: however many are recording, no more are held
    flow.end_recording()
    assert flow.recording == recording - 1


@pytest.mark.parametrize("concurrency", [1, 3, 50])
def test_room_never_passes_the_hold_limit(concurrency: int) -> None:
    flow = Flow.for_concurrency(concurrency, max_bytes=10**6)
    for recording in range(0, flow.hold_limit + 1, max(1, concurrency)):
        flow.recording = recording
        for held in range(recording, flow.hold_limit + 1):
            assert held + max(0, flow.room(held)) <= flow.hold_limit
