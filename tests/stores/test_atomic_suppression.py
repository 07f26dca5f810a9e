"""The contract's suppression tests catch a store that writes an outcome without its suppression entries,
or the entries without their outcome."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable
from dataclasses import replace

import pytest

from django_mailqueue.core.items import Completion, QueueItem
from django_mailqueue.stores.base import QueueStore
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.testing.contract import Suppressing


class OutcomeWithoutEntries(MemoryStore):
    """Records the outcome and forgets its suppression entries."""

    def complete(self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion) -> QueueItem | None:
        return super().complete(item_id, owner=owner, revision=revision, completion=replace(completion, suppress=()))


class EntriesBeforeOutcome(MemoryStore):
    """Lists the addresses, then records the outcome in a second step."""

    def complete(self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion) -> QueueItem | None:
        self.suppress(completion.suppress)
        return super().complete(item_id, owner=owner, revision=revision, completion=replace(completion, suppress=()))


def failures(make: Callable[..., QueueStore]) -> set[str]:
    """The names of the suppression contract tests that fail against the stores `make` builds."""
    contract = Suppressing()
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


def test_an_outcome_without_its_entries_fails_the_contract() -> None:
    assert {
        "test_an_outcome_puts_its_entries_on_the_list_in_its_step",
        "test_complete_many_writes_each_answers_entries_the_last_one_winning",
        "test_the_async_twins_write_and_look_up",
    } <= failures(lambda max_items=None: OutcomeWithoutEntries(max_items=max_items))


def test_entries_written_before_their_outcome_fail_the_contract() -> None:
    assert "test_no_entry_without_its_outcome" in failures(
        lambda max_items=None: EntriesBeforeOutcome(max_items=max_items)
    )
