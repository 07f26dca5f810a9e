"""The hand-written statements of the SQLite and PostgreSQL dialects, loaded from `sql/<dialect>/<name>.sql`."""

from __future__ import annotations

import functools
from importlib import resources

from ...models import QueuedItem, QueuedMessage, QueuedRecipient, RateBucket, SuppressedAddress, Suspension
from .rows import ITEM_FIELDS, RECIPIENT_FIELDS

#: What a statement's file may name in braces, filled in when it is loaded; the other `{…}` parts
#: (`{rows}`, `{lane}`, `{marks}`) are filled by the dialect for each use.
NAMES = {
    "{items}": QueuedItem._meta.db_table,
    "{recipients}": QueuedRecipient._meta.db_table,
    "{messages}": QueuedMessage._meta.db_table,
    "{buckets}": RateBucket._meta.db_table,
    "{suspensions}": Suspension._meta.db_table,
    "{suppressed}": SuppressedAddress._meta.db_table,
    "{item_columns}": ", ".join(ITEM_FIELDS),
    "{recipient_columns}": ", ".join(RECIPIENT_FIELDS),
}


@functools.cache
def statement(dialect: str, name: str) -> str:
    """The text of `sql/<dialect>/<name>.sql` on one line: its `--` comment lines cut, the `NAMES` filled in."""
    text = resources.files(__package__).joinpath("sql", dialect, f"{name}.sql").read_text(encoding="utf-8")
    sql = " ".join(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("--"))
    for placeholder, value in NAMES.items():
        sql = sql.replace(placeholder, value)
    return sql


def with_rows(dialect: str, name: str, rows: int) -> str:
    """`name`'s statement with its `{rows}` as `rows` copies of the row of `<name>_row.sql`, comma-separated
    (a statement without `{rows}` as it is)."""
    sql = statement(dialect, name)
    return sql.replace("{rows}", ", ".join([statement(dialect, f"{name}_row")] * rows)) if "{rows}" in sql else sql
