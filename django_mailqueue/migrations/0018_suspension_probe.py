"""A destination's probe beside its suspension (issue 20, Done-when line 3): the one connection every worker of
the store waits for before connecting to a destination nobody has found healthy yet (`QueueStore.take_probe`).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_mailqueue", "0017_subject_trigram"),
    ]

    operations = [
        migrations.AddField(
            model_name="suspension",
            name="probe_until",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="suspension",
            name="probe_holder",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
    ]
