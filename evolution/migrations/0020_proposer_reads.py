"""The proposer agent's reads (issue 33): what it read on its round, and the role its db_query logs in as.

On Postgres a role (``singularity_proposer``) that can log in and only SELECT the ``ro_*`` views is made once
per cluster (it may already exist: several databases share one cluster). The views themselves are made after
every migrate and dropped before (``evolution.investigate.views_sql``), so no later migration finds them
pinning a table it alters.
"""

from django.db import migrations, models

ROLE = "singularity_proposer"


def create(apps, schema_editor):
    """The read-only role (Postgres); its views are made after every migrate (``evolution.investigate.views_sql``)."""
    vendor = schema_editor.connection.vendor
    if vendor != "postgresql":
        return
    # A database user that may not create roles still migrates: the role is then made by whoever can
    # (``CREATE ROLE singularity_proposer LOGIN`` and this GRANT), and db_query says it cannot read until then.
    schema_editor.execute(
        f"""DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
                BEGIN
                    CREATE ROLE {ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
                EXCEPTION
                    WHEN duplicate_object OR unique_violation THEN NULL;
                    WHEN insufficient_privilege THEN RAISE NOTICE 'cannot create role {ROLE}: %%', SQLERRM;
                END;
            END IF;
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
                BEGIN
                    ALTER ROLE {ROLE} SET default_transaction_read_only = on;
                EXCEPTION WHEN insufficient_privilege THEN NULL;
                END;
            END IF;
        END $$"""
    )


def drop(apps, schema_editor):
    """Nothing to undo: the role stays (other databases of the cluster may use it); the views go before a migrate."""


class Migration(migrations.Migration):
    dependencies = [
        ("evolution", "0019_round_set_aside"),
        ("grading", "0013_plan_terms"),
    ]

    operations = [
        migrations.AddField(
            model_name="round",
            name="reads",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(create, drop),
    ]
