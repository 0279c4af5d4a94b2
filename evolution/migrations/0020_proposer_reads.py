"""The proposer agent's reads (issue 33): what it read on its round, and the read-only views its db_query sees.

On Postgres a role (``singularity_proposer``) that can log in and only SELECT those views is made once per
cluster (it may already exist: several databases share one cluster), then granted the views of this database.
"""

import re

from django.db import migrations, models

#: view name -> its SELECT. Users, tokens, settings, secrets and the judge's recorded prompt are in none.
VIEWS = {
    "ro_runs": (
        'SELECT e.id AS run_id, n.slug AS entity, e.run_kind, e.status, e.source, e.input, e.output, e.error, '
        'e.trace, {money:e.cost_usd} AS cost_usd, e.duration_ms, e.tool_failures, e."commit" AS commit_sha, e.loop_launched, '
        "e.started_at, e.completed_at FROM grading_execution e JOIN grading_entity n ON n.id = e.entity_id"
    ),
    "ro_grades": (
        "SELECT g.execution_id AS run_id, n.slug AS entity, g.status, g.score, g.passed, g.failure_category, "
        "g.criteria, g.feedback, g.metrics, g.error, {money:g.cost_usd} AS cost_usd, g.graded_at "
        "FROM grading_grade g JOIN grading_entity n ON n.id = g.entity_id"
    ),
    "ro_spans": (
        "SELECT t.execution_id AS run_id, t.trace_id, s.span_id, s.span "
        "FROM grading_otlpspan s JOIN grading_otlptrace t ON t.id = s.trace_id"
    ),
    "ro_ratings": (
        "SELECT r.execution_id AS run_id, n.slug AS entity, r.metric_id, r.value, r.normalized, r.note, r.created_at "
        "FROM grading_rating r JOIN grading_entity n ON n.id = r.entity_id"
    ),
    "ro_episodes": (
        "SELECT p.execution_id AS run_id, n.slug AS role, p.surface, p.status, p.opened_at, p.closed_at, "
        "p.closed_by, p.mixed_versions FROM grading_episode p JOIN grading_entity n ON n.id = p.role_id"
    ),
    "ro_turns": (
        "SELECT t.episode_id AS run_id, t.seq, t.role, t.text, t.tool_calls, t.error, {money:t.cost_usd} AS cost_usd, t.created_at "
        "FROM grading_turn t"
    ),
    "ro_cycles": (
        "SELECT c.id AS cycle_id, n.slug AS entity, c.origin, c.phase, c.status, c.reason, "
        'c."window" AS run_window, {money:c.spent_usd} AS spent_usd, c.started_at, c.proposed_at, c.merged_at, c.completed_at '
        "FROM evolution_cycle c JOIN grading_entity n ON n.id = c.entity_id"
    ),
    "ro_rounds": (
        "SELECT r.id AS round_id, r.cycle_id, r.number, r.parent_id, r.status, r.author, r.summary, r.hypothesis, "
        "r.files, r.error, {money:r.cost_usd} AS cost_usd, r.rejection, r.pr_number, r.check_verdict, r.created_at, r.proposed_at "
        "FROM evolution_round r"
    ),
    "ro_lessons": (
        "SELECT l.id AS lesson_id, n.slug AS entity, l.cycle_id, l.round_id, l.outcome, l.summary, l.hypothesis, "
        "l.rejection, l.per_metric, l.reason, l.files, l.created_at "
        "FROM evolution_lesson l JOIN grading_entity n ON n.id = l.entity_id"
    ),
    "ro_ideas": (
        "SELECT i.id AS idea_id, n.slug AS entity, i.text, i.status, i.cycle_id, i.created_at "
        "FROM evolution_idea i JOIN grading_entity n ON n.id = i.entity_id"
    ),
}

ROLE = "singularity_proposer"

#: Money on SQLite is an integer count of 1e-12 USD (singularity.fields.MoneyField): shown as exact decimal text.
_SQLITE_MONEY = (
    "(CASE WHEN {c} < 0 THEN '-' ELSE '' END || printf('%d.%012d', abs({c}) / 1000000000000, abs({c}) % 1000000000000))"
)


def _select(select, vendor):
    """The view's SELECT for ``vendor``: each ``{money:col}`` as the column (Postgres numeric) or its decimal text."""

    def money(match):
        column = match.group(1)
        return _SQLITE_MONEY.format(c=column) if vendor == "sqlite" else column

    return re.sub(r"\{money:([a-z_.]+)\}", money, select)


def create(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for name, select in VIEWS.items():
        schema_editor.execute(f"CREATE VIEW {name} AS {_select(select, vendor)}")
    if vendor != "postgresql":
        return
    # A database user that may not create roles still migrates: the role is then made by whoever can
    # (``CREATE ROLE singularity_proposer LOGIN`` and this GRANT), and db_query says it cannot read until then.
    views = ", ".join(VIEWS)
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
                EXECUTE 'GRANT SELECT ON {views} TO {ROLE}';
            END IF;
        END $$"""
    )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN "
            f"EXECUTE 'REVOKE ALL ON {', '.join(VIEWS)} FROM {ROLE}'; END IF; END $$"
        )
    for name in VIEWS:
        schema_editor.execute(f"DROP VIEW IF EXISTS {name}")


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
