"""Indexes for the admin at a million items: the queue's search (PostgreSQL, pg_trgm) and the history's filters.

On PostgreSQL the search (`q`: part of an address or of the subject) is served by trigram GIN indexes,
made only where the `pg_trgm` extension is there or may be created; where it may not, the migration goes
on without them and the search reads the rows (docs/admin.md, "Search"). The deferred items of one queue get
a partial index (the overview counts them per queue). The history gets an index for its queue filter and a
partial one for "possibly delivered", so no filter of its list reads every record.
"""

from django.db import migrations, models

from django_mailqueue.stores.orm.pg_search import TrigramSearchIndexes


class Migration(migrations.Migration):

    dependencies = [
        ("django_mailqueue", "0009_suppression"),
    ]

    operations = [
        TrigramSearchIndexes(),
        migrations.AddIndex(
            model_name="queueditem",
            index=models.Index(
                condition=models.Q(("attempts__gt", 0)),
                fields=["queue", "next_attempt", "seq"],
                name="mailqueue_item_queue_deferred",
            ),
        ),
        migrations.AddIndex(
            model_name="deliveryrecord",
            index=models.Index(fields=["queue", "recorded"], name="mailqueue_history_queue"),
        ),
        migrations.AddIndex(
            model_name="deliveryrecord",
            index=models.Index(
                condition=models.Q(("possibly_delivered", True)),
                fields=["recorded"],
                name="mailqueue_history_possibly",
            ),
        ),
    ]
