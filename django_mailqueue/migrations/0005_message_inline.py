"""PostgreSQL keeps a message of up to a page (~8 kB) inline, uncompressed, instead of TOAST.

A row longer than ~2 kB is otherwise compressed and moved to the TOAST table: a second table
and index written for nearly every queued mail, for bytes that stay in the queue only until
they are delivered. Raising the table's `toast_tuple_target` to the largest a page allows
keeps such rows in one heap tuple; larger messages are still TOASTed. Other databases: nothing.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

TABLE = "mailqueue_message"


def _largest_target(schema_editor: BaseDatabaseSchemaEditor) -> int:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('block_size')::int")
        (block_size,) = cursor.fetchone()
    return int(block_size) - 32  # the page header and one line pointer, aligned (TOAST_TUPLE_TARGET_MAIN)


def keep_inline(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        target = _largest_target(schema_editor)
        schema_editor.execute(f"ALTER TABLE {TABLE} SET (toast_tuple_target = {target})")


def toast_again(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} RESET (toast_tuple_target)")


class Migration(migrations.Migration):

    dependencies = [
        ("django_mailqueue", "0004_recipient_item_index"),
    ]

    operations = [migrations.RunPython(keep_inline, toast_again, elidable=False)]
