"""SQLite (3.31 and later): the recipients' table keyed by its item and position. Other databases: nothing.

Django makes the table a rowid table (`id`) and a unique index of (item, position): two b-trees that every
recipient added, delivered or dropped writes, and every read of an item's recipients looks up in both. The
table becomes `WITHOUT ROWID` with the primary key (item_id, position) — the unique index's key, now the
table's own — so one b-tree fewer: a lone `send_mail()`'s commit changes one page fewer (docs/performance.md,
"One `send_mail()` on SQLite: the recipients keyed by their item"). `id` stays, for Django, as a column made
from the key (`item_id * 2**20 + position`, generated: no insert names it); the store writes a recipient's row
by its item and position. Rows, the domain index and every other index are kept; reversible (the ids then
stay those the column made). A later migration that has Django remake this table on SQLite makes it Django's way
again (correct, one b-tree more): such a migration should run this one's rebuild after it.
"""

import sqlite3

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

TABLE = "mailqueue_recipient"
#: The key's column, as the table's definition names it: generated from the primary key.
KEYED_ID = '"id" integer NOT NULL GENERATED ALWAYS AS ("item_id" * 1048576 + "position") VIRTUAL'
#: What the keyed layout's definition ends with, after the columns.
KEYED_END = 'PRIMARY KEY ("item_id", "position")) WITHOUT ROWID'
ROWID_ID = '"id" integer NOT NULL PRIMARY KEY'
ROWID_END = 'CONSTRAINT "mailqueue_recipient_position" UNIQUE ("item_id", "position"))'


def _applies(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    # generated columns: SQLite 3.31 (Django 5.1's least; Django 4.2 runs on 3.21, where the table stays as it is)
    return schema_editor.connection.vendor == "sqlite" and sqlite3.sqlite_version_info >= (3, 31)


def _rebuild(schema_editor: BaseDatabaseSchemaEditor, *, keyed: bool) -> None:
    """The table made again keyed (or as Django makes it), its rows and indexes kept; nothing when already so
    or when its definition is not one this migration knows."""
    old_id, old_end, new_id, new_end = (ROWID_ID, ROWID_END, KEYED_ID, KEYED_END)
    if not keyed:
        old_id, old_end, new_id, new_end = new_id, new_end, old_id, old_end
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = %s", [TABLE])
        row = cursor.fetchone()
        if row is None:
            return
        definition: str = row[0]
        if old_id not in definition or not definition.endswith(old_end):
            return  # already so, or a table this migration does not know
        cursor.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = %s AND sql IS NOT NULL", [TABLE]
        )
        indexes = [sql for (sql,) in cursor.fetchall()]
        cursor.execute(f'PRAGMA table_xinfo("{TABLE}")')
        columns = [name for _cid, name, *_ in cursor.fetchall()]
    made = definition.replace(old_id, new_id).removesuffix(old_end) + new_end
    made = made.replace(f'"{TABLE}"', f'"{TABLE}__keyed"', 1)
    # a generated column takes no value: the keyed table's rows get theirs from the key
    copied = ", ".join(f'"{name}"' for name in columns if not keyed or name != "id")
    schema_editor.execute(made)
    schema_editor.execute(f'INSERT INTO "{TABLE}__keyed" ({copied}) SELECT {copied} FROM "{TABLE}"')
    schema_editor.execute(f'DROP TABLE "{TABLE}"')
    schema_editor.execute(f'ALTER TABLE "{TABLE}__keyed" RENAME TO "{TABLE}"')
    for sql in indexes:
        schema_editor.execute(sql)


def keyed(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if _applies(schema_editor):
        _rebuild(schema_editor, keyed=True)


def as_django_makes_it(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if _applies(schema_editor):
        _rebuild(schema_editor, keyed=False)


class Migration(migrations.Migration):

    dependencies = [
        ("django_mailqueue", "0021_message_lz4"),
    ]

    operations = [migrations.RunPython(keyed, as_django_makes_it, elidable=False)]
