"""Rating.entity: each rating carries its run's entity (issue 18), filled from the runs, then required.

Calibration reads an entity's ratings through ``rating_entity_metric``
instead of walking the entity's runs to find the rated ones.
"""

import django.db.models.deletion
from django.db import migrations, models

FILL = (
    "UPDATE grading_rating SET entity_id = "
    "(SELECT e.entity_id FROM grading_execution e WHERE e.id = grading_rating.execution_id)"
)


def fill(apps, schema_editor):
    schema_editor.execute(FILL)
    if schema_editor.connection.vendor == "postgresql":
        # The rows' deferred foreign-key checks now, so the column can be made NOT NULL in this transaction.
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [
        ("grading", "0008_entity_rateable"),
    ]

    operations = [
        migrations.AddField(
            model_name="rating",
            name="entity",
            field=models.ForeignKey(
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="ratings",
                to="grading.entity",
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="rating",
            name="entity",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="ratings",
                to="grading.entity",
            ),
        ),
        migrations.AddIndex(
            model_name="rating",
            index=models.Index(fields=["entity", "metric_id"], name="rating_entity_metric"),
        ),
    ]
