"""Building a ready worker from settings: the store, the SMTP stack and the history, wired once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..conf import QueueSettings, get_settings
from ..core.clock import Clock, SystemClock
from ..core.observer import Observer
from ..history import History, history_alias
from ..stores import get_store
from ..stores.base import QueueStore
from .engine import Worker
from .memory import release_large_buffers
from .shaper import Shaper

if TYPE_CHECKING:
    from ..delivery import Deliverer


def smtp_deliverer(
    settings: QueueSettings,
    *,
    clock: Clock | None = None,
    observer: Observer | None = None,
    shaper: Shaper | None = None,
) -> Deliverer:
    """The delivery stack of `settings`: routes, MX lookups, SMTP sessions cached between attempts, and the
    worker's traffic shaping when `shaper` is given."""
    from ..delivery import Deliverer
    from ..delivery.smtp import CACHE_TIME, SmtpTransport

    transport = SmtpTransport(cache_time=CACHE_TIME)
    concurrency = shaper.concurrency if shaper is not None else None
    return Deliverer(
        settings,
        clock=clock or SystemClock(),
        transport=transport,
        observer=observer,
        gate=shaper,
        concurrency=concurrency,
    )


def build_worker(
    *,
    settings: QueueSettings | None = None,
    store: QueueStore | None = None,
    owner: str | None = None,
    queues: Sequence[str] | None = None,
    concurrency: int | None = None,
    once: bool = False,
    release_memory: bool = False,
    observer: Observer | None = None,
) -> Worker:
    """A worker ready to `run()`, as `manage.py mailqueue_work` runs it.

    `settings` and `store` default to the project's (`MAILQUEUE`, `get_store()`). The
    worker delivers over SMTP, writes the delivery history when `HISTORY_DAYS` > 0, and
    closes the store (its connections, not its data) when its run ends, so a run in a
    fresh event loop — a Celery task's `asyncio.run()` — leaves nothing bound to it.

    `release_memory=True` fixes glibc's mmap threshold for the whole process (see
    `worker.memory.release_large_buffers`): right for a process that runs a worker and
    nothing else, as the command does; leave it off inside a web or Celery process
    unless you want it there too. `observer` is told what the worker does (the Prometheus metrics:
    `django_mailqueue.metrics.worker.WorkerMetrics`). Raises `QueueError` for bad settings.
    """
    settings = settings if settings is not None else get_settings()
    store = store if store is not None else get_store()
    if release_memory:
        release_large_buffers()
    history = History(history_alias(store)) if settings.history_days > 0 else None
    clock = SystemClock()
    shaper = Shaper(settings, store, clock=clock, concurrency=concurrency)
    return Worker(
        store=store,
        settings=settings,
        deliverer=smtp_deliverer(settings, clock=clock, observer=observer, shaper=shaper),
        clock=clock,
        shaper=shaper,
        owner=owner,
        queues=queues,
        concurrency=concurrency,
        once=once,
        history=history,
        close_store=True,
        observer=observer,
    )
