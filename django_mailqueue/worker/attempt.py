"""What the worker keeps about one attempt under way, and what it needs of the delivery layer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from ..core.items import QueueItem, Suppression

if TYPE_CHECKING:
    from ..delivery import AttemptResult
    from .shaper import Ticket


class AttemptDeliverer(Protocol):
    """What the worker needs of the delivery layer (`django_mailqueue.delivery.Deliverer`)."""

    async def deliver(self, sender: str, recipients: Sequence[str], message: bytes) -> AttemptResult: ...

    async def aclose(self) -> None: ...


@dataclass
class Attempt:
    """One item claimed by the worker: waiting for a slot, delivering, then recording its outcome."""

    item: QueueItem
    task: asyncio.Task[None] | None = None
    lost: bool = False
    #: the message, when it was read with the claim (small messages are)
    message: bytes | None = None
    prefetched: bool = False
    #: bytes counted against MAX_BYTES_IN_FLIGHT while the attempt runs
    cost: int = 0
    #: when the lease ends, as last claimed or renewed
    lease_expires: datetime | None = None
    #: the SMTP part is over and its slot free: the outcome is being recorded
    recording: bool = False
    #: pending recipients on the suppression list, as claimed (worker/suppression.py); None: not known,
    #: the look-up failed
    listed: dict[str, Suppression] | None = field(default_factory=dict)
    #: its destinations' connection slots and tokens (traffic shaping), while it delivers
    ticket: Ticket | None = None


@dataclass
class Retry:
    """A store write tried again while the store is out of reach and the lease holds."""

    delay: float = 0.2
    #: the outage was told — and an earlier try may have been applied, its answer lost
    told: bool = False
    #: failed tries so far (a `--once` run's reads count them: `engine.ONCE_TRIES`)
    tries: int = 0


#: Messages up to this size are read in one call right after the claim; larger ones when their attempt starts.
PREFETCH_SIZE = 256 * 1024
