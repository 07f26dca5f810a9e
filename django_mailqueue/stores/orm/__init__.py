"""The ORM store: `OrmStore` and the dialects it speaks — SQLite, PostgreSQL, and the portable ORM one."""

from .store import OrmStore

__all__ = ["OrmStore"]
