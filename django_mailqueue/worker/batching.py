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

    No entry waits for a timer: the first is written at once, and those that
    come while it is being written form the next batch — the busier the
    worker, the larger the batches. `submit` waits for the entry's own answer;
    `post` does not.
    """

    def __init__(self, write: Callable[[list[_In]], Awaitable[Sequence[_Out]]], *, limit: int = 100) -> None:
        self._write = write
        self._limit = limit
        self._queue: list[tuple[_In, asyncio.Future[_Out] | None]] = []
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._busy = False

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="mailqueue-batcher")
        self._ready.set()

    async def submit(self, entry: _In) -> _Out:
        future: asyncio.Future[_Out] = asyncio.get_running_loop().create_future()
        self._queue.append((entry, future))
        self._ensure_running()
        return await future

    def post(self, entries: Sequence[_In]) -> None:
        self._queue.extend((entry, None) for entry in entries)
        if entries:
            self._ensure_running()

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
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
        """Write what is queued, wait for the batch being written, then stop."""
        while self._queue or self._busy:
            if self._queue:
                self._ensure_running()
            await asyncio.sleep(0.005)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
