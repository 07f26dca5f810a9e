"""The configured store: `get_store()` builds it once from `MAILQUEUE["STORE"]`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from django.utils.module_loading import import_string

from ..core.errors import QueueError
from .base import QueueStore

if TYPE_CHECKING:
    from ..conf import QueueSettings

_lock = threading.Lock()
_store: QueueStore | None = None
_S = TypeVar("_S", bound=QueueStore)

__all__ = ["QueueStore", "configured_store_class", "get_store", "reset_store"]


def get_store() -> QueueStore:
    """The store `MAILQUEUE["STORE"]` names, built on first use (it connects lazily)."""
    global _store
    store = _store
    if store is not None:
        return store
    with _lock:
        if _store is None:
            from ..conf import get_settings

            settings = get_settings()
            cls = import_string(settings.store.backend)
            _store = cls(settings.store.options, max_items=settings.max_items)
        return _store


def configured_store_class(kind: Callable[[], type[_S]]) -> tuple[QueueSettings, type[_S]] | None:
    """The settings and `MAILQUEUE["STORE"]`'s class when it is a `kind()` (called only here, so a missing
    driver is no error); None otherwise, and when the setting is wrong (mailqueue.E003 reports that)."""
    from ..conf import get_settings

    try:
        settings = get_settings()
        cls = import_string(settings.store.backend)
        base = kind()
    except (QueueError, ImportError):
        return None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        return None
    return settings, cls


def reset_store() -> None:
    """Forget the built store (after the settings change); closes it."""
    global _store
    with _lock:
        old, _store = _store, None
    if old is not None:
        old.close()
