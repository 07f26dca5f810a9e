"""The contract's DSN tests catch a store that writes an outcome without its DSNs, or DSNs without their outcome."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable
from dataclasses import replace

import pytest

from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import Completion, QueueItem
from django_mailqueue.stores.base import QueueStore
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.testing.contract import CompletingWithDsns


class OutcomeWithoutDsns(MemoryStore):
    """Records the outcome and forgets its DSNs."""

    def complete(self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion) -> QueueItem | None:
        return super().complete(item_id, owner=owner, revision=revision, completion=replace(completion, dsns=()))


class DsnsBeforeOutcome(MemoryStore):
    """Adds the DSNs, then records the outcome in a second step (the saga the worker had before)."""

    def complete(self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion) -> QueueItem | None:
        if completion.dsns:
            self.add_many(completion.dsns, now=completion.now or SystemClock().now())
        return super().complete(item_id, owner=owner, revision=revision, completion=replace(completion, dsns=()))


def failures(make: Callable[..., QueueStore]) -> set[str]:
    """The names of the DSN contract tests that fail against the stores `make` builds."""
    contract = CompletingWithDsns()
    failed = set()
    for name in sorted(n for n in dir(contract) if n.startswith("test_")):
        test = getattr(contract, name)
        kwargs = {"store": make()} if "store" in inspect.signature(test).parameters else {"make_store": make}
        try:
            result = test(**kwargs)
            if inspect.iscoroutine(result):
                asyncio.run(result)
        except (AssertionError, pytest.fail.Exception):
            failed.add(name)
    return failed


def test_a_whole_store_passes() -> None:
    assert failures(lambda max_items=None: MemoryStore(max_items=max_items)) == set()


def test_an_outcome_without_its_dsns_fails_the_contract() -> None:
    failed = failures(lambda max_items=None: OutcomeWithoutDsns(max_items=max_items))
    assert {
        "test_the_outcome_and_its_dsns_are_written_together",
        "test_an_item_dropped_as_done_leaves_its_dsns",
        "test_complete_many_writes_each_answer_with_its_own_dsns",
        "test_the_async_twins_write_the_dsns_with_the_outcome",
    } <= failed, failed


def test_dsns_without_their_outcome_fail_the_contract() -> None:
    failed = failures(lambda max_items=None: DsnsBeforeOutcome(max_items=max_items))
    assert {
        "test_no_dsn_without_its_outcome",
        "test_complete_many_writes_each_answer_with_its_own_dsns",
        "test_the_async_twins_write_the_dsns_with_the_outcome",
    } <= failed, failed
