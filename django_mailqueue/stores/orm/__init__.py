"""The ORM store: `OrmStore` and the dialects it speaks — SQLite, PostgreSQL, and the portable ORM one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .store import OrmStore

__all__ = ["OrmStore"]


def __getattr__(name: str) -> Any:
    # `OrmStore` imported at its first use: the history's modules (stores/orm/sqlite.py and others) are imported
    # by a worker on Redis too, which never needs the store (docs/performance.md)
    if name == "OrmStore":
        from .store import OrmStore

        return OrmStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
