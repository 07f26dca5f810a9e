"""The suppression list's table: addresses a permanent failure put on it (issue 21)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_mailqueue', '0008_shaping'),
    ]

    operations = [
        migrations.CreateModel(
            name='SuppressedAddress',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('address', models.CharField(max_length=320, unique=True)),
                ('reply_code', models.SmallIntegerField(blank=True, null=True)),
                ('reply_status', models.CharField(blank=True, max_length=16)),
                ('reply_text', models.TextField(blank=True)),
                ('since', models.BigIntegerField()),
                ('item_id', models.UUIDField(blank=True, null=True)),
            ],
            options={
                'verbose_name': 'suppressed address',
                'verbose_name_plural': 'suppression list',
                'db_table': 'mailqueue_suppression',
                'indexes': [models.Index(fields=['since', 'address'], name='mailqueue_suppression_since')],
            },
        ),
    ]
