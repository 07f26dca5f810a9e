"""A history row's `lease_lost`: its attempt's worker lost the lease before the outcome was recorded, so the row
tells what that attempt found, not the item's outcome (docs/reliability.md, "History before the outcome")."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("django_mailqueue", "0019_bucket_window"),
    ]

    operations = [
        migrations.AddField(
            model_name="deliveryrecord",
            name="lease_lost",
            field=models.BooleanField(default=False),
        ),
    ]
