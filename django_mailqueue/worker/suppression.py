"""The suppression list at claim time: a claimed batch's recipients looked up in one store call, and what
the listed ones come to (docs/architecture.md, "The suppression list at claim time")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from ..core.errors import QueueError
from ..core.items import RecipientOutcome, Suppression
from ..delivery.attempt import AttemptResult
from ..stores.base import ClaimedBatch, QueueStore
from ..suppression import SuppressionSettings, listed_outcome, suppression_key
from .attempt import Attempt

#: What an attempt whose every pending recipient is listed delivers: nothing, no connection.
NOTHING_TRIED = AttemptResult(())


async def look_up(
    store: QueueStore, attempts: Sequence[Attempt], rule: SuppressionSettings | None, *, now: datetime
) -> QueueError | None:
    """Set each attempt's `listed`: its pending recipients on the list, from one store call for the batch.
    When the store fails, each attempt's `listed` is None (the attempt waits) and the error is returned."""
    if rule is None or not attempts:
        return None
    keys = {r.address: suppression_key(r.address) for a in attempts for r in a.item.pending}
    try:
        found = await store.asuppressed(sorted(set(keys.values())), since=rule.cut_off(now))
    except QueueError as exc:
        for attempt in attempts:
            attempt.listed = None
        return exc
    for attempt in attempts:
        pending = attempt.item.pending
        attempt.listed = {r.address: found[keys[r.address]] for r in pending if keys[r.address] in found}
    return None


def cut_off(rule: SuppressionSettings | None, now: datetime) -> datetime | None:
    """The oldest entry that applies at `now` (`claim_batch`'s `suppressed_since`); None: no list, no look-up."""
    return None if rule is None else rule.cut_off(now)


def listed_from(batch: ClaimedBatch, attempts: Sequence[Attempt]) -> QueueError | None:
    """`look_up`'s work from the look-up the claim made (`claim_batch`): each attempt's `listed`, or when it failed
    None, and its error returned."""
    for attempt in attempts:
        attempt.listed = None if batch.listed_error is not None else batch.listed.get(attempt.item.id, {})
    return batch.listed_error


def listed_outcomes(listed: Mapping[str, Suppression]) -> tuple[RecipientOutcome, ...]:
    """Each listed recipient failed at once, with the status that listed it."""
    return tuple(listed_outcome(address, entry) for address, entry in listed.items())
