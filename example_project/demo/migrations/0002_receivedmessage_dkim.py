from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("demo", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="receivedmessage",
            name="dkim",
            field=models.CharField(blank=True, max_length=200),
        ),
    ]
