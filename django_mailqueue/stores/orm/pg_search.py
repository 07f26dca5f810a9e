"""The queue's search on PostgreSQL: which index each term is read from (a btree range of lowercase addresses, the
domain index, the subject's trigram GIN index where pg_trgm may be made), the SQL a term is tested with, and the
migrations' operations that make those indexes."""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.operations.base import Operation

from ...core.search import Term, terms
from .statements import statement

logger = logging.getLogger("django_mailqueue.migrations")

#: The subject's trigram index (migration 0017): a subject word's items, the one trigram index the search reads.
WORD_INDEX = "mailqueue_item_subject_trgm"
WORD_INDEX_ON = "mailqueue_item USING gin (subject gin_trgm_ops)"
#: A recipient address's trigram index, made by migration 0010 and dropped by 0016: an address start is a range
#: of `ADDRESS_START_INDEX`, so it served no search and took an entry per trigram of every address added.
ADDRESS_TRIGRAM_INDEX = "mailqueue_recipient_address_trgm"
#: The sender's and subject's trigram index of migration 0010, replaced by `WORD_INDEX` in 0017: the sender is
#: not searched, yet every item added put an entry per trigram of its sender in it.
TEXT_TRIGRAM_INDEX = "mailqueue_item_text_trgm"
#: The trigram indexes migration 0010 makes, by name.
TRIGRAM_INDEXES = {
    ADDRESS_TRIGRAM_INDEX: "mailqueue_recipient USING gin (address gin_trgm_ops)",
    TEXT_TRIGRAM_INDEX: "mailqueue_item USING gin (sender gin_trgm_ops, subject gin_trgm_ops)",
}
#: A word shorter than this has no trigram an index can look up: it is tested on the rows.
MIN_INDEXED = 3
#: The btree of the recipients' lowercase addresses (an address start is a range of it), made by migration 0015.
ADDRESS_START_INDEX = "mailqueue_recipient_address_start"
ADDRESS_START = (
    f"CREATE INDEX IF NOT EXISTS {ADDRESS_START_INDEX} ON mailqueue_recipient "
    "(lower(address) text_pattern_ops) INCLUDE (item_id, address)"
)


def escape_like(text: str) -> str:
    """`text` as a `LIKE` pattern matching only itself (backslash, the default escape, before `%` and `_`)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def word_pattern(word: str) -> str:
    """A whole word as a PostgreSQL regular expression (a word is letters, digits and underscores only)."""
    return rf"\y{word}\y"


def candidate_reads(term: Term, *, indexed_words: bool) -> list[tuple[str, str]] | None:
    """The statements (name, value) whose rows are the items a term matches; None when an index cannot serve it."""
    if term.domain is not None:
        return [("search_domain", term.domain)]
    reads = [("search_recipients", escape_like(term.text) + "%")]
    if term.word:
        if not indexed_words or len(term.text) < MIN_INDEXED:
            return None
        reads.append(("search_items", word_pattern(term.text)))
    return reads


def tested_sql(dialect: str, search: str) -> tuple[str, list[str]]:
    """The search as a condition on one row of `{items}` (each term a probe of that item's recipients or a test
    of its subject; every term must hold), and its parameters."""
    parts, params = [], []
    for term in terms(search):
        if term.domain is not None:
            parts.append(statement(dialect, "search_tested_domain"))
            params.append(term.domain)
            continue
        sql = statement(dialect, "search_tested_address")
        params.append(escape_like(term.text) + "%")
        if term.word:
            word = statement(dialect, "search_tested_word")
            sql = f"({sql} OR {word})"
            params.append(word_pattern(term.text))
        parts.append(sql)
    return "(" + " AND ".join(parts or ["TRUE"]) + ")", params


def word_index_present(conn: BaseDatabaseWrapper) -> bool:
    """Whether the subject's trigram index is in the database (made by migration 0010, or by hand later)."""
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = ANY(current_schemas(false)) AND indexname = %s",
            [WORD_INDEX],
        )
        row = cursor.fetchone()
    return row is not None and row[0] == 1


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


class AddressStartIndex(Operation):
    """Create `mailqueue_recipient_address_start` on PostgreSQL only: the recipients' lowercase addresses in
    `text_pattern_ops` order (a `LIKE 'start%'` is a range of it), the item and the address included so the
    search reads the index alone. SQLite has no `LIKE` range on an expression: its search tests the rows."""

    reversible = True
    reduces_to_sql = False

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # an index the models do not declare (an operator class, PostgreSQL's): the migration state is unchanged

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        conn = schema_editor.connection
        if conn.vendor == "postgresql" and self.allow_migrate_model(
            conn.alias, from_state.apps.get_model(app_label, "QueuedRecipient")
        ):
            schema_editor.execute(ADDRESS_START)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"DROP INDEX IF EXISTS {ADDRESS_START_INDEX}")

    def describe(self) -> str:
        return "Create the search's index of the recipients' lowercase addresses (PostgreSQL)"


def _pg_trgm_installed(schema_editor: Any) -> bool:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
        return cursor.fetchone() is not None


class DropAddressTrigramIndex(Operation):
    """Drop `ADDRESS_TRIGRAM_INDEX` on PostgreSQL only (migration 0016); undone, make it again as migration 0010
    did, where pg_trgm is installed."""

    reversible = True
    reduces_to_sql = False

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # an index the models never declared: the migration state is unchanged

    def _applies(self, schema_editor: Any, from_state: Any, app_label: str) -> bool:
        conn = schema_editor.connection
        return bool(
            conn.vendor == "postgresql"
            and self.allow_migrate_model(conn.alias, from_state.apps.get_model(app_label, "QueuedRecipient"))
        )

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if self._applies(schema_editor, from_state, app_label):
            schema_editor.execute(f"DROP INDEX IF EXISTS {ADDRESS_TRIGRAM_INDEX}")

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if not self._applies(schema_editor, from_state, app_label):
            return
        if _pg_trgm_installed(schema_editor):
            definition = TRIGRAM_INDEXES[ADDRESS_TRIGRAM_INDEX]
            schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {ADDRESS_TRIGRAM_INDEX} ON {definition}")

    def describe(self) -> str:
        return "Drop the recipients' address trigram index, which the search no longer reads (PostgreSQL)"


class SubjectTrigramIndex(Operation):
    """Replace migration 0010's `TEXT_TRIGRAM_INDEX` (sender and subject) by `WORD_INDEX` (the subject alone) on
    PostgreSQL where pg_trgm is installed (migration 0017); undone, the other way round. A plain `CREATE INDEX`:
    adds wait while it is built."""

    reversible = True
    reduces_to_sql = False

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # indexes the models never declared: the migration state is unchanged

    def _applies(self, schema_editor: Any, from_state: Any, app_label: str) -> bool:
        conn = schema_editor.connection
        return bool(
            conn.vendor == "postgresql"
            and self.allow_migrate_model(conn.alias, from_state.apps.get_model(app_label, "QueuedItem"))
            and _pg_trgm_installed(schema_editor)
        )

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if self._applies(schema_editor, from_state, app_label):
            schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {WORD_INDEX} ON {WORD_INDEX_ON}")
            schema_editor.execute(f"DROP INDEX IF EXISTS {TEXT_TRIGRAM_INDEX}")

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if self._applies(schema_editor, from_state, app_label):
            definition = TRIGRAM_INDEXES[TEXT_TRIGRAM_INDEX]
            schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {TEXT_TRIGRAM_INDEX} ON {definition}")
            schema_editor.execute(f"DROP INDEX IF EXISTS {WORD_INDEX}")

    def describe(self) -> str:
        return "Make the search's trigram index of the subject alone, without the sender (PostgreSQL)"
