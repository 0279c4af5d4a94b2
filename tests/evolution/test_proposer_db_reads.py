"""db_query and db_schema (issue 33): the ro_* views and nothing else, read-only by construction, on both databases.

The reads go through a connection of their own (Postgres: logged in as the read-only role the migration made;
SQLite: ``mode=ro`` with an authorizer), so the rows they see must be committed: these tests are transactional.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.db import connection

from evolution.investigate.database import VIEWS, Reader, statement_problem
from grading.models import Execution
from tests.evolution.loop_helpers import graded, looped

pytestmark = pytest.mark.django_db(transaction=True)

WRITES = [
    "INSERT INTO grading_execution (id) VALUES ('x')",
    "UPDATE grading_grade SET passed = true",
    "DELETE FROM grading_execution",
    "ATTACH DATABASE '/tmp/x.db' AS x",
    "PRAGMA writable_schema = ON",
    "DROP VIEW ro_runs",
    "CREATE TABLE loot AS SELECT * FROM auth_user",
    "SELECT 1; DELETE FROM grading_execution",
]


@pytest.fixture
def reader():
    reading = Reader()
    yield reading
    reading.close()


@pytest.fixture
def runs():
    entity = looped()
    bad = graded(entity, bad=True)
    good = graded(entity, bad=False)
    User.objects.create_user("alice", password="secret-pass")
    return bad, good


def test_the_bad_runs_are_read_from_the_views(reader, runs):
    bad, _ = runs
    answer = reader.query(
        "SELECT r.run_id, r.entity, g.passed, r.cost_usd FROM ro_runs r JOIN ro_grades g ON g.run_id = r.run_id "
        "WHERE g.passed = false"
    )
    assert "refused" not in answer, answer
    [row] = answer["rows"]
    assert str(row["run_id"]).replace("-", "") == str(bad.execution_id).replace("-", "")
    assert row["entity"] == "triage" and not row["passed"]
    assert Decimal(row["cost_usd"]) == bad.execution.cost_usd  # money as decimal text, never a float
    json.dumps(answer)  # what the model is handed is JSON


def test_a_cte_over_the_views_reads(reader, runs):
    answer = reader.query(
        "WITH bad AS (SELECT run_id FROM ro_grades WHERE passed = false) SELECT count(*) AS n FROM bad"
    )
    assert answer["rows"] == [{"n": 1}]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM auth_user",
        "SELECT * FROM grading_execution",
        "SELECT (SELECT count(*) FROM auth_user) AS n FROM ro_runs",
        "SELECT * FROM ro_runs WHERE run_id IN (SELECT CAST(id AS TEXT) FROM authtoken_token)",
        "SELECT * FROM evolution_cycle",
    ],
)
def test_a_table_outside_the_views_is_refused(reader, runs, sql):
    answer = reader.query(sql)
    assert "rows" not in answer and "only the ro_* views" in answer["refused"] or "failed" in answer["refused"]
    assert "alice" not in json.dumps(answer)


@pytest.mark.parametrize("sql", WRITES)
def test_a_write_is_refused_before_it_is_sent(reader, sql):
    assert reader.query(sql)["refused"]
    assert statement_problem(sql)


@pytest.mark.parametrize("sql", WRITES)
def test_a_write_is_impossible_by_construction_even_past_the_statement_check(reader, runs, sql):
    """The connection itself cannot write: the statement goes straight to it, past ``statement_problem``."""
    from evolution.investigate.database import QueryRefused

    before = Execution.objects.count()
    with pytest.raises(QueryRefused):
        reader.rows(sql, 10)
    assert Execution.objects.count() == before
    assert "loot" not in connection.introspection.table_names()
    assert "ro_runs" in connection.introspection.table_names(include_views=True)


def test_the_schema_lists_every_view_with_its_columns_and_never_a_users_column(reader, runs):
    schema = reader.schema()
    assert [v["view"] for v in schema["views"]] == list(VIEWS)
    assert all("columns" in v for v in schema["views"]), schema
    columns = {c for v in schema["views"] for c in v["columns"]}
    assert {"run_id", "passed", "failure_category", "text"} <= columns
    assert not columns & {"password", "user_id", "started_by_id", "counterpart_name", "counterpart_telegram_id", "key"}


def test_the_row_cap_cuts_and_says_so(reader, runs, settings):
    settings.LOOP_READ_MAX_ROWS = 1
    answer = reader.query("SELECT run_id FROM ro_runs")
    assert len(answer["rows"]) == 1 and "only the first 1 rows" in answer["cut"]


def test_a_query_past_its_deadline_is_stopped(reader, settings):
    settings.LOOP_READ_STATEMENT_TIMEOUT_MS = 50
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    answer = reader.query(endless)
    assert "ran past 50 ms" in answer["refused"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the read-only role is Postgres's")
def test_on_postgres_the_session_is_the_read_only_role_and_cannot_become_another(reader, runs):
    assert reader.query("SELECT current_user AS who, session_user AS s")["rows"] == [
        {"who": "singularity_proposer", "s": "singularity_proposer"}
    ]
    escape = reader.query("SELECT set_config('role', 'postgres', true) AS r")
    assert "refused" in escape and "permission denied" in escape["refused"]
    assert "refused" in reader.query("SELECT query_to_xml('SELECT * FROM auth_user', true, true, '') AS x")


def test_a_cte_named_like_a_view_reaches_no_other_column(reader, runs):
    answer = reader.query("WITH ro_runs AS (SELECT password FROM auth_user) SELECT * FROM ro_runs")
    assert "refused" in answer and "secret" not in json.dumps(answer)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the read-only role is Postgres's")
def test_a_read_role_that_cannot_log_in_is_said_to_the_model_not_raised(reader, settings):
    settings.LOOP_READ_DB_USER = "nobody_at_all"
    answer = reader.query("SELECT run_id FROM ro_runs")
    assert "the database cannot be read now" in answer["refused"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the read-only role is Postgres's")
def test_on_postgres_migrate_gave_the_role_its_derived_password_as_a_scram_verifier():
    """A server that asks for a password (scram-sha-256) lets the role in with no one setting it: the verifier
    migrate stored is the derived password's, checked here as the server checks a login (RFC 5802)."""
    import base64
    import hashlib
    import hmac

    from evolution.investigate.views_sql import ROLE, role_password

    with connection.cursor() as cursor:
        cursor.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", [ROLE])
        [(stored,)] = cursor.fetchall()
    scheme, rest = stored.split("$", 1)
    assert scheme == "SCRAM-SHA-256"
    params, keys = rest.split("$")
    iterations, salt = params.split(":")
    stored_key, _ = keys.split(":")
    salted = hashlib.pbkdf2_hmac("sha256", role_password().encode(), base64.b64decode(salt), int(iterations))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    assert base64.b64encode(hashlib.sha256(client_key).digest()).decode() == stored_key
    assert role_password() not in stored  # the password itself never went to the server
