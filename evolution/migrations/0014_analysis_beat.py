from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("evolution", "0013_breaker_and_live_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="round",
            name="analysis_beat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
