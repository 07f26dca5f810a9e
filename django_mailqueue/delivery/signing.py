"""The worker's DKIM signing thread: RSA private-key operations handed to it in batches, and the GIL handed to it.

OpenSSL signs with the GIL released, so the thread uses another core while the
event loop runs sessions. A hand-over (`run_in_executor`: a queue, a wake-up, a
callback through the loop's self-pipe) cost the loop about as much as the
signature's whole Python share; here the requests of a turn of the loop, and
those made while the thread is busy, go over together. After each operation
the thread needs the GIL back, and a busy loop starves it (it retakes the GIL
right after each system call, before the woken thread runs): the loop hands it
over when an operation is due to be over (docs/performance.md, "DKIM signing
floor" and "The signing thread starved of the GIL").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence

from ..dkim import DkimSigner, PendingSignature

_Waiting = list[tuple[PendingSignature, "asyncio.Future[bytes]"]]

#: How long the loop waits at most for the thread to take the GIL (s): a waiting thread takes it in microseconds
_HAND_OFF_TIMEOUT = 0.0005
#: The operation's CPU time assumed before the first is measured (s): about RSA-2048's with OpenSSL
_FIRST_OPERATION = 0.0004
#: ... and at least this (s): a failing operation's does not make the loop look every few microseconds
_SHORTEST_OPERATION = 0.00005
#: An operation is taken to be over (the thread waiting for the GIL) this many times its CPU time after it began
_OVERDUE = 1.5


class SigningThread:
    """Finishes `PendingSignature`s in one thread; `sign` gives a future of the DKIM-Signature field (b"" when the
    operation failed: `DkimSigner.finish` logs it). At most one batch is in the thread at a time."""

    def __init__(self, signer: DkimSigner) -> None:
        self._signer = signer
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        #: the loop the requests come from (a new one starts over: the old one's batch may never come back)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: _Waiting = []
        #: a hand-over is scheduled or a batch is in the thread
        self._busy = False
        #: batches handed over so far
        self.handovers = 0
        #: when the thread's current private-key operation started (perf_counter), None between them
        self._operation_since: float | None = None
        #: the CPU time of the thread's last private-key operation (s): longer than that, it waits for the GIL
        self._operation_time = _FIRST_OPERATION
        #: set by the thread once it has the GIL back after an operation
        self._resumed = threading.Event()
        #: times the loop handed the GIL to the thread
        self.gil_hand_offs = 0
        self._nudging: asyncio.TimerHandle | None = None

    def sign(self, pending: PendingSignature) -> asyncio.Future[bytes]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._waiting, self._busy, self._nudging = loop, [], False, None
        future: asyncio.Future[bytes] = loop.create_future()
        self._waiting.append((pending, future))
        if not self._busy:
            self._busy = True
            loop.call_soon(self._hand_over, loop)
        else:
            self._nudge()
        return future

    def _nudge(self) -> None:
        """(On the loop.) When the thread's operation should be over, wait (GIL released) until the thread has
        taken the GIL: else it gets it only when the loop idles or after the switch interval (5 ms), one
        signature a switch interval at worst. The wait costs the loop a thread switch, ~tens of µs."""
        since = self._operation_since
        if since is not None and time.perf_counter() - since > _OVERDUE * self._operation_time:
            self._resumed.clear()  # the thread sets it with the GIL, which this thread holds: after this
            self.gil_hand_offs += 1
            self._resumed.wait(_HAND_OFF_TIMEOUT)

    def _nudge_while_busy(self, loop: asyncio.AbstractEventLoop) -> None:
        """(On the loop.) `_nudge` about once an operation while a batch is in the thread."""
        self._nudging = None
        if loop is not self._loop or not self._busy:
            return
        self._nudge()
        self._nudging = loop.call_later(self._operation_time, self._nudge_while_busy, loop)

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:
            return
        batch = [(pending, future) for pending, future in self._waiting if not future.done()]
        self._waiting = []
        if not batch:
            self._busy = False
            return
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mailqueue-dkim")
        try:
            job = self._executor.submit(self._finish_all, [pending for pending, _ in batch])
        except RuntimeError as exc:  # shut down (the worker is stopping)
            self._busy = False
            for _, future in batch:
                future.set_exception(exc)
            return
        self.handovers += 1
        job.add_done_callback(lambda done: _call_back(loop, self._done, loop, batch, done))
        if self._nudging is None:
            self._nudging = loop.call_later(self._operation_time, self._nudge_while_busy, loop)

    def _finish_all(self, pendings: Sequence[PendingSignature]) -> list[bytes]:
        finish = self._signer.finish
        return [finish(pending, self._operation(pending)) for pending in pendings]

    def _operation(self, pending: PendingSignature) -> Callable[[], bytes]:
        """The private-key operation, its start and its CPU time noted for `_nudge`."""

        def timed() -> bytes:
            cpu = time.thread_time()
            self._operation_since = time.perf_counter()
            try:
                return pending.private_key_operation()
            finally:
                self._operation_since = None
                self._resumed.set()
                self._operation_time = max(time.thread_time() - cpu, _SHORTEST_OPERATION)

        return timed

    def _done(
        self, loop: asyncio.AbstractEventLoop, batch: _Waiting, job: concurrent.futures.Future[list[bytes]]
    ) -> None:
        if loop is not self._loop:
            return
        error = None if job.cancelled() else job.exception()
        if job.cancelled() or error is not None:
            for _, future in batch:
                if not future.done():
                    future.set_exception(error or asyncio.CancelledError())
        else:
            for (_, future), field in zip(batch, job.result(), strict=True):
                if not future.done():
                    future.set_result(field)
        self._hand_over(loop)  # what was asked meanwhile, or idle

    def close(self) -> None:
        """End the thread (without waiting for a batch in it)."""
        if self._nudging is not None:
            self._nudging.cancel()
            self._nudging = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None


def _call_back(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: object) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop is closed: no one waits
        pass
