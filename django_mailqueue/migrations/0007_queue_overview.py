"""The queue overview in the admin index and sidebar: a proxy of the item model (no table)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('django_mailqueue', '0006_lean_add'),
    ]

    operations = [
        migrations.CreateModel(
            name='QueueOverview',
            fields=[
            ],
            options={
                'verbose_name': 'queue overview',
                'verbose_name_plural': 'queue overview',
                'proxy': True,
                'indexes': [],
                'constraints': [],
            },
            bases=('django_mailqueue.queueditem',),
        ),
    ]
