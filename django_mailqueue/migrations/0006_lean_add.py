"""A message added writes fewer things: no foreign-key checks, and two of the item's indexes partial.

The recipient and message rows keep no foreign key to their item in the database: the store writes
an item's three rows in one statement (or transaction) and deletes them together, and Django's ORM
cascades a delete itself. The database's check cost a trigger and a lock on the item row for every
message added. The "leased" and "deferred" indexes now hold only leased and deferred items, so a
new message (neither) adds no entry to them.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_mailqueue', '0005_message_inline'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='queueditem',
            name='mailqueue_item_lease',
        ),
        migrations.RemoveIndex(
            model_name='queueditem',
            name='mailqueue_item_attempts',
        ),
        migrations.AlterField(
            model_name='queuedmessage',
            name='item',
            field=models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='message_row', serialize=False, to='django_mailqueue.queueditem'),
        ),
        migrations.AlterField(
            model_name='queuedrecipient',
            name='item',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='recipient_rows', to='django_mailqueue.queueditem'),
        ),
        migrations.AddIndex(
            model_name='queueditem',
            index=models.Index(condition=models.Q(('lease_expires__isnull', False)), fields=['lease_expires'], name='mailqueue_item_leased'),
        ),
        migrations.AddIndex(
            model_name='queueditem',
            index=models.Index(condition=models.Q(('attempts__gt', 0)), fields=['next_attempt', 'seq'], name='mailqueue_item_deferred'),
        ),
    ]
