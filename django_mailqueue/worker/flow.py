"""Flow control: how many items a worker claims, starts and holds, as counters with no I/O."""

from __future__ import annotations

from dataclasses import dataclass

#: Items claimed ahead of the free slots, in `CONCURRENCY`s: the larger the claims, the fewer claim
#: transactions per message (one claim is made once half of them have started).
PREFETCH_FACTOR = 3

#: How long an outcome (or a history row) waits for others' company before its store call, while other
#: attempts are still delivering — or until `RECORD_FILL` × `CONCURRENCY` of them are ready: fewer,
#: larger batches cost far less CPU per message. The attempt's `CONCURRENCY` slot is already free by
#: then, so the wait does not slow delivery.
RECORD_LINGER = 0.05
RECORD_FILL = 3
#: Items whose outcomes are being recorded a worker holds at most, in `CONCURRENCY`s (beyond this
#: it claims nothing more until the store catches up): two batches' worth, one lingering, one written.
RECORDING_FACTOR = 2 * RECORD_FILL


@dataclass
class Flow:
    """The worker's counters: attempts delivering (each in one of `concurrency` slots), attempts recording
    their outcome, and the bytes of the messages being delivered, against `max_bytes`.

    An attempt goes `start(cost)` → `end_delivery(cost)` → `end_recording()`; items claimed and not yet
    let go (`held`, which the worker counts) include those waiting for a slot.
    """

    concurrency: int
    #: items claimed ahead of the free slots
    prefetch: int
    #: MAX_BYTES_IN_FLIGHT
    max_bytes: int
    delivering: int = 0
    recording: int = 0
    bytes_in_flight: int = 0

    @classmethod
    def for_concurrency(cls, concurrency: int, *, max_bytes: int, prefetch: int | None = None) -> Flow:
        return cls(concurrency, PREFETCH_FACTOR * concurrency if prefetch is None else prefetch, max_bytes)

    @property
    def hold_limit(self) -> int:
        """Items held at most: those delivering or claimed ahead, plus up to `RECORDING_FACTOR` × concurrency
        whose outcomes are being recorded (each keeps a lease and a header block)."""
        return (1 + RECORDING_FACTOR) * self.concurrency + self.prefetch

    @property
    def batch_enough(self) -> int:
        """Outcomes ready that make a record batch go at once, without its linger."""
        return RECORD_FILL * self.concurrency

    def room(self, held: int) -> int:
        """How many more items to claim when `held` are held: slots and prefetch not taken by items waiting
        or delivering — and, however many outcomes are being recorded (a slow store), never past `hold_limit`."""
        busy = held - self.recording
        return min(self.concurrency + self.prefetch - busy, self.hold_limit - held)

    def claim_now(self, room: int, waiting: int) -> bool:
        """Claim in batches (half the prefetch at least) unless nothing is left waiting: a claim per
        finished attempt would cost a store round trip per message."""
        return room > 0 and (not waiting or room >= max(1, self.prefetch // 2))

    @staticmethod
    def cost(size: int) -> int:
        """The bytes an attempt on a message of `size` counts: read, and written to the socket."""
        return 2 * size

    def may_start(self, cost: int) -> bool:
        """A slot is free and `cost` fits the byte budget — or nothing else is in flight (a message larger
        than the whole budget still goes, alone)."""
        if self.delivering >= self.concurrency:
            return False
        return not self.bytes_in_flight or self.bytes_in_flight + cost <= self.max_bytes

    def start(self, cost: int) -> None:
        self.delivering += 1
        self.bytes_in_flight += cost

    def end_delivery(self, cost: int) -> None:
        """The SMTP part is over: its slot and bytes are free, its outcome is being recorded."""
        self.delivering -= 1
        self.bytes_in_flight -= cost
        self.recording += 1

    def hold(self) -> None:
        """An item recorded without an attempt (its destinations are suspended): no slot, no bytes."""
        self.recording += 1

    def end_recording(self) -> None:
        self.recording -= 1

    @property
    def more_coming(self) -> bool:
        """Attempts are delivering, so more outcomes will be ready soon."""
        return self.delivering > 0
