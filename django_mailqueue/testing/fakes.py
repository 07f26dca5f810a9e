"""A scripted deliverer for tests: each recipient answers as told, no network."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..core.items import RecipientOutcome, RecipientState, Reply
from ..delivery import AttemptResult

DELIVERED = Reply(250, "2.0.0", "Ok: queued")
GREYLISTED = Reply(451, "4.7.1", "Greylisted, try again later")
REJECTED = Reply(550, "5.1.1", "No such user")


@dataclass
class DeliveryCall:
    sender: str
    recipients: tuple[str, ...]
    message: bytes


@dataclass
class ScriptedDeliverer:
    """Answers each recipient with the next reply of its script (the last repeats).

    `script` maps an address to a list of replies; an address not in it is
    delivered. `delay` seconds pass before each attempt returns, and `gate`,
    when set, must be set before an attempt returns. Every call is recorded.
    """

    script: Mapping[str, Sequence[Reply]] = field(default_factory=dict)
    delay: float = 0.0
    gate: asyncio.Event | None = None
    remote_mta: str = "mx.test.example"
    calls: list[DeliveryCall] = field(default_factory=list)
    lost_after_data: frozenset[str] = frozenset()
    _turns: dict[str, int] = field(default_factory=dict)

    async def deliver(self, sender: str, recipients: Sequence[str], message: bytes) -> AttemptResult:
        self.calls.append(DeliveryCall(sender, tuple(recipients), message))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.gate is not None:
            await self.gate.wait()
        outcomes = []
        for address in recipients:
            replies = self.script.get(address, [DELIVERED])
            turn = self._turns.get(address, 0)
            self._turns[address] = turn + 1
            reply = replies[min(turn, len(replies) - 1)]
            state = (
                RecipientState.DELIVERED
                if reply.code is not None and reply.code < 400
                else RecipientState.FAILED
                if reply.permanent
                else RecipientState.PENDING
            )
            outcomes.append(RecipientOutcome(address, state, reply, self.remote_mta))
        return AttemptResult(
            tuple(outcomes), possibly_delivered=frozenset(a for a in recipients if a in self.lost_after_data)
        )

    async def aclose(self) -> None:
        return None

    def deliveries_to(self, address: str) -> int:
        return sum(1 for call in self.calls if address in call.recipients)
