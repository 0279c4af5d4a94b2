"""The read-only views the proposer's ``db_query`` sees (issue 33), made after every ``migrate`` and dropped before.

A view pins the tables it reads: on SQLite a migration that rebuilds one of them (Django remakes a table to
alter it) fails while the view stands, and on Postgres so does a column type change. So no migration holds
them: ``pre_migrate`` drops every view, ``post_migrate`` makes them again from the tables as they now are and
grants them to the read-only role (Postgres), whatever migrations ran in between.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.db import connections

log = logging.getLogger(__name__)

#: view name -> its SELECT. Users, tokens, settings, secrets and the judge's recorded prompt are in none.
VIEWS = {
    "ro_runs": (
        "SELECT e.id AS run_id, n.slug AS entity, e.run_kind, e.status, e.source, e.input, e.output, e.error, "
        'e.trace, {money:e.cost_usd} AS cost_usd, e.duration_ms, e.tool_failures, e."commit" AS commit_sha, e.loop_launched, '
        "e.started_at, e.completed_at FROM grading_execution e JOIN grading_entity n ON n.id = e.entity_id"
    ),
    "ro_grades": (
        "SELECT g.execution_id AS run_id, n.slug AS entity, g.status, g.score, g.passed, g.failure_category, "
        "g.criteria, g.feedback, g.metrics, g.error, {money:g.cost_usd} AS cost_usd, g.graded_at "
        "FROM grading_grade g JOIN grading_entity n ON n.id = g.entity_id"
    ),
    "ro_spans": (
        "SELECT e.id AS run_id, n.slug AS entity, e.trace AS spans "
        "FROM grading_execution e JOIN grading_entity n ON n.id = e.entity_id"
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


def _select(select: str, vendor: str) -> str:
    """The view's SELECT for ``vendor``: each ``{money:col}`` as the column (Postgres numeric) or its decimal text."""

    def money(match: re.Match[str]) -> str:
        column = match.group(1)
        return _SQLITE_MONEY.format(c=column) if vendor == "sqlite" else column

    return re.sub(r"\{money:([a-z_.]+)\}", money, select)


def role_password() -> str:
    """The read-only role's password when none is configured: derived from SECRET_KEY, so every process of the
    deployment (web, workers, the doctor) knows it and no person has to set one."""
    from django.utils.crypto import salted_hmac

    return salted_hmac("singularity.loop-read-role", ROLE, algorithm="sha256").hexdigest()


def scram_verifier(password: str, *, salt: bytes | None = None, iterations: int = 4096) -> str:
    """``password`` as Postgres stores it for SCRAM-SHA-256 (RFC 5802/7677): what ``ALTER ROLE … PASSWORD`` is
    sent, so the password itself never reaches the server's statement log."""
    import base64
    import hashlib
    import hmac
    import os

    salt = os.urandom(16) if salt is None else salt
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = base64.b64encode
    return f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}${b64(stored_key).decode()}:{b64(server_key).decode()}"


def set_role_password(using: str = "default") -> bool:
    """Give the read-only role its derived password (Postgres, when the role is ours and no password is configured).

    False when there is nothing to do or the database user may not (it is then said by the doctor, Loop proposer
    reads): a server that trusts local logins needs none.
    """
    from django.conf import settings
    from django.db import DatabaseError, transaction

    connection = connections[using]
    if connection.vendor != "postgresql" or settings.LOOP_READ_DB_PASSWORD or settings.LOOP_READ_DB_USER != ROLE:
        return False
    try:
        with transaction.atomic(using=using), connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [ROLE])
            if cursor.fetchone() is None:
                return False
            # A literal, not a parameter: ALTER ROLE takes none. The verifier is base64 and '$' only.
            cursor.execute(f"ALTER ROLE {ROLE} PASSWORD '{scram_verifier(role_password())}'")
    except DatabaseError as exc:
        log.warning("loop reads: cannot set the password of %s (%s); set LOOP_READ_DB_PASSWORD", ROLE, exc)
        return False
    return True


def drop_views(using: str = "default") -> None:
    """Drop every view (and the role's grants on them): what a migration must not find standing."""
    connection = connections[using]
    with connection.cursor() as cursor:
        for name in VIEWS:
            cursor.execute(f"DROP VIEW IF EXISTS {name}")


def create_views(using: str = "default") -> list[str]:
    """Make every view whose tables exist, and grant them to the read-only role where it exists (Postgres).

    Returns the views made. A database migrated back before a table exists gets the views it can have.
    """
    connection = connections[using]
    tables = set(connection.introspection.table_names())
    made = []
    with connection.cursor() as cursor:
        for name, select in VIEWS.items():
            needed = set(re.findall(r"\b(?:FROM|JOIN) ([a-z_]+)", select))
            if not needed <= tables:
                continue
            cursor.execute(f"DROP VIEW IF EXISTS {name}")
            cursor.execute(f"CREATE VIEW {name} AS {_select(select, connection.vendor)}")
            made.append(name)
        if connection.vendor == "postgresql" and made:
            cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [ROLE])
            if cursor.fetchone() is not None:
                cursor.execute(f"GRANT SELECT ON {', '.join(made)} TO {ROLE}")
    if connection.vendor == "postgresql" and made:
        set_role_password(using)
    return made


def before_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    drop_views(using)


def after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """Make the views a migrate dropped; a ``flush`` (which sends post_migrate too, after every transactional test)
    finds them standing and leaves them."""
    connection = connections[using]
    with connection.cursor() as cursor:
        standing = {t.name for t in connection.introspection.get_table_list(cursor) if t.type == "v"}
    if not set(VIEWS) <= standing:
        create_views(using)
