"""The worker's DKIM signing thread: RSA private-key operations handed to it in batches, not one by one.

OpenSSL signs with the GIL released, so the thread uses another core while the
event loop runs sessions. A hand-over (`run_in_executor`: a queue, a wake-up, a
callback through the loop's self-pipe) cost the loop about as much as the
signature's whole Python share; here the requests of a turn of the loop, and
those made while the thread is busy, go over together (docs/performance.md,
"DKIM signing floor").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence

from ..dkim import DkimSigner, PendingSignature

_Waiting = list[tuple[PendingSignature, "asyncio.Future[bytes]"]]


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

    def sign(self, pending: PendingSignature) -> asyncio.Future[bytes]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._waiting, self._busy = loop, [], False
        future: asyncio.Future[bytes] = loop.create_future()
        self._waiting.append((pending, future))
        if not self._busy:
            self._busy = True
            loop.call_soon(self._hand_over, loop)
        return future

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

    def _finish_all(self, pendings: Sequence[PendingSignature]) -> list[bytes]:
        finish = self._signer.finish
        return [finish(pending, pending.private_key_operation) for pending in pendings]

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
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None


def _call_back(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: object) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop is closed: no one waits
        pass
