"""PostgreSQL compresses a message of more than ~2 kB in its row with lz4, and still keeps up to a page inline.

Migration 0005 kept such messages inline and uncompressed (`toast_tuple_target` at a page): no TOAST
write, but every byte of the message in the WAL and the table, the bulk of a batch's commit. The column's
storage `MAIN` with lz4 (PostgreSQL 14 and later, when built with it) compresses a row over the default
target in place and moves it to TOAST only past a page, as 0005 did; a message lz4 cannot shrink stays as
it is. The bytes read back are the same. Without lz4 (or before 14), and on other databases: nothing.
Why: docs/performance.md, "PostgreSQL: the batch add's bytes".
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

TABLE = "mailqueue_message"


def _lz4(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    """Whether this server can compress with lz4 (14 and later, built `--with-lz4`)."""
    if schema_editor.connection.vendor != "postgresql" or schema_editor.connection.pg_version < 140000:
        return False
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
        row = cursor.fetchone()
    return bool(row and row[0])


def compress(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if _lz4(schema_editor):
        schema_editor.execute(f"ALTER TABLE {TABLE} RESET (toast_tuple_target)")
        schema_editor.execute(f"ALTER TABLE {TABLE} ALTER COLUMN data SET STORAGE MAIN, ALTER COLUMN data SET COMPRESSION lz4")


def inline_again(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Back to 0005's layout (rows written meanwhile stay compressed; PostgreSQL reads both)."""
    if _lz4(schema_editor):
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('block_size')::int")
            (block_size,) = cursor.fetchone()
        schema_editor.execute(
            f"ALTER TABLE {TABLE} ALTER COLUMN data SET STORAGE EXTENDED, ALTER COLUMN data SET COMPRESSION DEFAULT"
        )
        schema_editor.execute(f"ALTER TABLE {TABLE} SET (toast_tuple_target = {int(block_size) - 32})")


class Migration(migrations.Migration):

    dependencies = [
        ("django_mailqueue", "0020_history_lease_lost"),
    ]

    operations = [migrations.RunPython(compress, inline_again, elidable=False)]
