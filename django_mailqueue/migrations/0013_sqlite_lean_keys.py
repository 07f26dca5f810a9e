"""SQLite: fewer pages a queued message's commit writes. Other databases: nothing.

Django makes an `AutoField` on SQLite `AUTOINCREMENT`, so every add also rewrote the page of
`sqlite_sequence`; and a `OneToOneField` primary key as a `bigint` key, which is not SQLite's rowid:
the message table was a table and a unique index of the same key, two b-trees to write for every
message added or delivered. The item and recipient tables lose `AUTOINCREMENT` (a key is then
`max(key) + 1`: an item's `seq` may be used again after the newest item has left the queue, which
nothing outside one transaction holds on to — every reference to an item from outside is its `id`);
the message's key becomes its rowid (`integer`). The tables are rebuilt with their rows, indexes
and constraints (docs/performance.md, "The single send_mail on SQLite").
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

#: (table, its text in Django's layout, the same in the lean one)
_CHANGES = (
    ("mailqueue_item", '"seq" integer NOT NULL PRIMARY KEY AUTOINCREMENT', '"seq" integer NOT NULL PRIMARY KEY'),
    ("mailqueue_recipient", '"id" integer NOT NULL PRIMARY KEY AUTOINCREMENT', '"id" integer NOT NULL PRIMARY KEY'),
    ("mailqueue_message", '"item_id" bigint NOT NULL PRIMARY KEY', '"item_id" integer NOT NULL PRIMARY KEY'),
)


def _rebuild(schema_editor: BaseDatabaseSchemaEditor, table: str, old: str, new: str, *, django: str) -> None:
    """`table` made again with `old` in its definition replaced by `new`, its rows and its indexes as they
    were; nothing when it is already so (`django`: the text Django made, which holds the lean one)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = %s", [table])
        row = cursor.fetchone()
        if row is None:
            return
        definition: str = row[0]
        in_django_layout = django in definition  # the lean text is a part of Django's: ask for Django's
        if in_django_layout != (old == django) or old not in definition:
            return  # already so, or a table this migration does not know
        cursor.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = %s AND sql IS NOT NULL", [table]
        )
        indexes = [sql for (sql,) in cursor.fetchall()]
        cursor.execute(f'PRAGMA table_info("{table}")')
        columns = ", ".join(f'"{name}"' for _cid, name, *_ in cursor.fetchall())
    made = definition.replace(old, new).replace(f'"{table}"', f'"{table}__lean"', 1)
    if f'"{table}__lean"' not in made:
        made = made.replace(table, f'"{table}__lean"', 1)  # a definition without quotes around its name
    schema_editor.execute(made)
    schema_editor.execute(f'INSERT INTO "{table}__lean" ({columns}) SELECT {columns} FROM "{table}"')
    schema_editor.execute(f'DROP TABLE "{table}"')
    schema_editor.execute(f'ALTER TABLE "{table}__lean" RENAME TO "{table}"')
    for sql in indexes:
        schema_editor.execute(sql)


def lean(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        for table, django_text, lean_text in _CHANGES:
            _rebuild(schema_editor, table, django_text, lean_text, django=django_text)


def as_django_makes_them(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        for table, django_text, lean_text in _CHANGES:
            _rebuild(schema_editor, table, lean_text, django_text, django=django_text)


class Migration(migrations.Migration):

    dependencies = [
        ("django_mailqueue", "0012_keep_failed"),
    ]

    operations = [migrations.RunPython(lean, as_django_makes_them, elidable=False)]
