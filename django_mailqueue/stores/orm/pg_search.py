"""The queue's search on PostgreSQL: trigram GIN indexes (pg_trgm) made where the extension may be, and read first."""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.operations.base import Operation

logger = logging.getLogger("django_mailqueue.migrations")

#: The trigram indexes, by name: a recipient's address, and an item's sender and subject.
TRIGRAM_INDEXES = {
    "mailqueue_recipient_address_trgm": "mailqueue_recipient USING gin (address gin_trgm_ops)",
    "mailqueue_item_text_trgm": "mailqueue_item USING gin (sender gin_trgm_ops, subject gin_trgm_ops)",
}
#: A search shorter than this has no trigram an index can look up: it reads the rows.
MIN_INDEXED = 3


def escape_like(text: str) -> str:
    """`text` as a `LIKE` pattern matching only itself (backslash, the default escape, before `%` and `_`)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def trigram_indexes_present(conn: BaseDatabaseWrapper) -> bool:
    """Whether every trigram index is in the database (made by migration 0010, or by hand later)."""
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = ANY(current_schemas(false)) AND indexname = ANY(%s)",
            [list(TRIGRAM_INDEXES)],
        )
        row = cursor.fetchone()
    return row is not None and row[0] == len(TRIGRAM_INDEXES)


class TrigramSearchIndexes(Operation):
    """Create `pg_trgm` (as `django.contrib.postgres`'s `TrigramExtension` does) and the trigram indexes, on
    PostgreSQL only. Where the extension is missing and may not be created (a user without the right to,
    a server without the contrib package) this does nothing but say so: the migration never fails for it."""

    reversible = True
    reduces_to_sql = False

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # indexes the models do not declare (SQLite has no GIN): the migration state is unchanged

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        conn = schema_editor.connection
        if conn.vendor != "postgresql" or not self.allow_migrate_model(
            conn.alias, from_state.apps.get_model(app_label, "QueuedItem")
        ):
            return
        from django.contrib.postgres.operations import TrigramExtension

        try:
            with transaction.atomic(using=conn.alias, savepoint=True):
                TrigramExtension().database_forwards(app_label, schema_editor, from_state, to_state)
        except DatabaseError as exc:
            logger.warning(
                "django_mailqueue: pg_trgm could not be created (%s): the admin's search reads the rows; "
                "docs/admin.md, 'Search', says how to add its indexes later",
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            )
            return
        for name, definition in TRIGRAM_INDEXES.items():
            schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {definition}")

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        for name in TRIGRAM_INDEXES:
            schema_editor.execute(f"DROP INDEX IF EXISTS {name}")

    def describe(self) -> str:
        return "Create pg_trgm and the search's trigram indexes where PostgreSQL allows it"
