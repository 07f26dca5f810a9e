"""The history's indexes in its list's whole order, (recorded, id): the admin reads a page of the history, whole
or filtered by state, domain, queue or "possibly delivered", from an index with no sort, and a deep page's keys
from the index alone (issue 25: page 1,000 of a million records). `recorded`'s own index gives way to
(recorded, id), which serves pruning as well, and holds the state (PostgreSQL's `INCLUDE`): the overview's
outcomes per hour are read from it alone.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_mailqueue", "0010_search_indexes"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="deliveryrecord",
            name="mailqueue_history_state",
        ),
        migrations.RemoveIndex(
            model_name="deliveryrecord",
            name="mailqueue_history_domain",
        ),
        migrations.RemoveIndex(
            model_name="deliveryrecord",
            name="mailqueue_history_queue",
        ),
        migrations.RemoveIndex(
            model_name="deliveryrecord",
            name="mailqueue_history_possibly",
        ),
        migrations.AlterField(
            model_name="deliveryrecord",
            name="recorded",
            field=models.DateTimeField(),
        ),
        migrations.AddIndex(
            model_name="deliveryrecord",
            index=models.Index(fields=["recorded", "id"], include=["state"], name="mailqueue_history_recorded"),
        ),
        migrations.AddIndex(
            model_name="deliveryrecord",
            index=models.Index(fields=["state", "recorded", "id"], name="mailqueue_history_state"),
        ),
        migrations.AddIndex(
            model_name="deliveryrecord",
            index=models.Index(fields=["domain", "recorded", "id"], name="mailqueue_history_domain"),
        ),
        migrations.AddIndex(
            model_name="deliveryrecord",
            index=models.Index(fields=["queue", "recorded", "id"], name="mailqueue_history_queue"),
        ),
        migrations.AddIndex(
            model_name="deliveryrecord",
            index=models.Index(
                condition=models.Q(("possibly_delivered", True)),
                fields=["recorded", "id"],
                name="mailqueue_history_possibly",
            ),
        ),
    ]
