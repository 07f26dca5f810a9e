"""The configured store: `get_store()` builds it once from `MAILQUEUE["STORE"]`."""

from __future__ import annotations

import threading

from django.utils.module_loading import import_string

from .base import QueueStore

_lock = threading.Lock()
_store: QueueStore | None = None

__all__ = ["QueueStore", "get_store", "reset_store"]


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


def reset_store() -> None:
    """Forget the built store (after the settings change); closes it."""
    global _store
    with _lock:
        old, _store = _store, None
    if old is not None:
        old.close()
