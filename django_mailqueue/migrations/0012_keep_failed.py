"""Failed items kept to be sent again (`KEEP_FAILED`): when an item failed, and the permission to send it again.

A kept item's `next_attempt` is `core.items.NEVER`, so the due index serves the "failed" filter and the prune
(one range of it) and no claim meets it: no index of its own.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("django_mailqueue", "0011_history_order_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="queueditem",
            name="failed_at",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AlterModelOptions(
            name="queueditem",
            options={
                "permissions": [
                    ("send_now_queueditem", "Can send queued messages now"),
                    ("reschedule_queueditem", "Can reschedule queued messages"),
                    ("cancel_queueditem", "Can cancel queued messages"),
                    ("send_again_queueditem", "Can send failed messages again"),
                ],
                "verbose_name": "queued message",
            },
        ),
    ]
