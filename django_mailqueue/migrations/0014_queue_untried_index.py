"""The untried items of each queue, by next attempt (partial: `attempts = 0`): the overview's due and scheduled
counts of one queue read only its untried items, to a bound (issue 25: a queue whose 50,000 items were all
deferred had those counts walk its whole range of `mailqueue_item_queue_due` to find none, 22,000 blocks).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_mailqueue", "0013_sqlite_lean_keys"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="queueditem",
            index=models.Index(
                condition=models.Q(("attempts", 0)),
                fields=["queue", "next_attempt", "seq"],
                name="mailqueue_item_queue_untried",
            ),
        ),
    ]
