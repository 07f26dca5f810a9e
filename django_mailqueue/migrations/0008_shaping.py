"""Traffic shaping's tables: the token buckets every worker takes from, and the suspended destinations."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_mailqueue', '0007_queue_overview'),
    ]

    operations = [
        migrations.CreateModel(
            name='RateBucket',
            fields=[
                ('name', models.CharField(max_length=300, primary_key=True, serialize=False)),
                ('rate', models.FloatField()),
                ('burst', models.IntegerField()),
                ('tokens', models.FloatField()),
                ('wanted', models.IntegerField()),
                ('updated', models.BigIntegerField()),
            ],
            options={
                'verbose_name': 'rate bucket',
                'db_table': 'mailqueue_bucket',
            },
        ),
        migrations.CreateModel(
            name='Suspension',
            fields=[
                ('destination', models.CharField(max_length=300, primary_key=True, serialize=False)),
                ('until', models.BigIntegerField(db_index=True)),
                ('since', models.BigIntegerField()),
                ('strikes', models.IntegerField()),
                ('reply_code', models.SmallIntegerField(blank=True, null=True)),
                ('reply_status', models.CharField(blank=True, max_length=16)),
                ('reply_text', models.TextField(blank=True)),
            ],
            options={
                'verbose_name': 'suspended destination',
                'db_table': 'mailqueue_suspension',
                'permissions': [('resume_suspension', 'Can resume suspended destinations')],
            },
        ),
    ]
