"""Group commit for the worker: calls made while the previous batch was being written go in the next one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

_In = TypeVar("_In")
_Out = TypeVar("_Out")


class Batcher(Generic[_In, _Out]):
    """Collects entries and writes them `limit` at a time with `write`, one batch after another.

    The first entry is written at once — unless `more_coming()` says others are
    on their way, in which case the batch waits for them up to `linger` seconds,
    or until `enough` entries (at most `limit`) are in. Those that come while a batch is being
    written form the next batch: the busier the worker, the larger the batches,
    and the fewer store calls per entry. `submit` waits for the entry's own
    answer; `post` does not.
    """

    def __init__(
        self,
        write: Callable[[list[_In]], Awaitable[Sequence[_Out]]],
        *,
        limit: int = 100,
        linger: float = 0.0,
        more_coming: Callable[[], bool] | None = None,
        enough: int | None = None,
    ) -> None:
        self._write = write
        self._limit = limit
        self._enough = min(limit, enough) if enough else limit
        self._linger = linger
        self._more_coming = more_coming
        self._queue: list[tuple[_In, asyncio.Future[_Out] | None]] = []
        self._ready = asyncio.Event()
        self._full = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._busy = False
        self._closing = False

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="mailqueue-batcher")
        self._ready.set()
        if len(self._queue) >= self._enough:
            self._full.set()

    async def submit(self, entry: _In) -> _Out:
        return await self.enqueue(entry)

    def enqueue(self, entry: _In) -> asyncio.Future[_Out]:
        """`submit` without the coroutine: the future of the entry's answer (gathering
        futures costs no task each, as gathering coroutines does)."""
        future: asyncio.Future[_Out] = asyncio.get_running_loop().create_future()
        self._queue.append((entry, future))
        self._ensure_running()
        return future

    def post(self, entries: Sequence[_In]) -> None:
        self._queue.extend((entry, None) for entry in entries)
        if entries:
            self._ensure_running()

    async def _gather(self) -> None:
        """Wait (at most `linger`) for the batch to fill while more entries are on their way."""
        if self._linger <= 0 or self._more_coming is None or self._closing:
            return
        if len(self._queue) >= self._enough or not self._more_coming():
            return
        self._full.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._full.wait(), self._linger)

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
                await self._gather()
                batch, self._queue = self._queue[: self._limit], self._queue[self._limit :]
                self._busy = True
                try:
                    answers = await self._write([entry for entry, _ in batch])
                except Exception as exc:  # noqa: BLE001 - each caller gets the failure
                    for _, future in batch:
                        if future is not None and not future.done():
                            future.set_exception(exc)
                    continue
                finally:
                    self._busy = False
                for (_, future), answer in zip(batch, answers, strict=True):
                    if future is not None and not future.done():
                        future.set_result(answer)

    async def close(self) -> None:
        """Write what is queued (without lingering), wait for the batch being written, then stop."""
        self._closing = True
        self._full.set()
        while self._queue or self._busy:
            if self._queue:
                self._ensure_running()
            await asyncio.sleep(0.005)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
