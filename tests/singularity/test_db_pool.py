"""On Postgres a request or a task takes an open connection from a pool and hands it back (``settings``: psycopg_pool
through Django), instead of opening one of its own; ``SINGULARITY_DB_POOL=false`` turns it off, and a bad value of
any of its settings stops the start with an error naming the variable."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
#: The pool's own behaviour runs where the suite runs with it: Postgres, ``SINGULARITY_DB_POOL=true``.
POOLED = pytest.mark.skipif(
    connection.vendor != "postgresql" or not connection.settings_dict["OPTIONS"].get("pool"),
    reason="the pool is Postgres's, and on when SINGULARITY_DB_POOL=true",
)
PG = "postgres://postgres@127.0.0.1:5432/postgres"

#: Prints the default database's OPTIONS as JSON, as the settings built them from the environment.
SHOW = (
    "import json, django; from django.conf import settings; django.setup(); "
    "db = settings.DATABASES['default']; "
    "print(json.dumps({**db.get('OPTIONS', {}), 'checked': db.get('CONN_HEALTH_CHECKS', False)}))"
)


def options(**env):
    """The database OPTIONS the settings build under ``env`` (a fresh interpreter), or the error it stops with."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SINGULARITY_DB_POOL")}
    environ.update(DJANGO_SETTINGS_MODULE="singularity.settings", **env)
    done = subprocess.run([sys.executable, "-c", SHOW], cwd=ROOT, env=environ, capture_output=True, text=True)
    if done.returncode:
        return done.stderr.strip().splitlines()[-1]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_postgres_pools_its_connections_when_asked():
    pool = options(DATABASE_URL=PG, SINGULARITY_DB_POOL="true")["pool"]
    assert pool == {
        "min_size": 1,
        "max_size": 20,
        "timeout": 30.0,
    }


def test_the_pool_is_sized_and_timed_from_the_environment():
    pool = options(
        DATABASE_URL=PG, SINGULARITY_DB_POOL="true", SINGULARITY_DB_POOL_MAX="4", SINGULARITY_DB_POOL_TIMEOUT_SECS="2.5"
    )["pool"]
    assert pool == {
        "min_size": 1,
        "max_size": 4,
        "timeout": 2.5,
    }


def test_the_pool_is_off_unless_asked_for():
    assert "pool" not in options(DATABASE_URL=PG)
    assert "pool" not in options(DATABASE_URL=PG, SINGULARITY_DB_POOL="false")


def test_sqlite_has_no_pool():
    assert "pool" not in options(DATABASE_URL="sqlite:////tmp/pool-test.sqlite3")


@pytest.mark.parametrize(
    "env, named",
    [
        ({"SINGULARITY_DB_POOL": "sometimes"}, "SINGULARITY_DB_POOL"),
        ({"SINGULARITY_DB_POOL": "true", "SINGULARITY_DB_POOL_MAX": "0"}, "SINGULARITY_DB_POOL_MAX"),
        ({"SINGULARITY_DB_POOL": "true", "SINGULARITY_DB_POOL_MAX": "many"}, "SINGULARITY_DB_POOL_MAX"),
        (
            {"SINGULARITY_DB_POOL": "true", "SINGULARITY_DB_POOL_TIMEOUT_SECS": "soon"},
            "SINGULARITY_DB_POOL_TIMEOUT_SECS",
        ),
    ],
)
def test_a_bad_pool_setting_stops_the_start_naming_it(env, named):
    answer = options(DATABASE_URL=PG, **env)
    assert isinstance(answer, str) and "ImproperlyConfigured" in answer and named in answer


@pytest.mark.django_db(transaction=True)
@POOLED
def test_a_closed_connection_goes_back_to_the_pool_and_the_next_request_reuses_it():
    def opened():
        return connection.pool.get_stats().get("connections_num", 0)  # connections the pool ever opened

    assert connection.pool is not None
    connection.close()
    connection.close_pool()  # a pool of this test's own: none of its connections was ended by an earlier test
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    before = opened()
    for _ in range(5):
        connection.close()  # what the end of a request or a task does
        assert connection.connection is None
        with connection.cursor() as cursor:  # the next request
            cursor.execute("SELECT 1")
    assert opened() == before  # each took a connection the pool held open: none was opened


@pytest.mark.django_db(transaction=True)
@POOLED
def test_a_pooled_connection_the_server_ended_is_replaced_not_handed_to_the_next_request():
    import psycopg

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    connection.close()  # back to the pool, where the server ends it (a restart, an idle timeout, an operator)
    info = connection.settings_dict
    with psycopg.connect(
        host=info["HOST"] or "127.0.0.1", port=info["PORT"] or 5432, user=info["USER"], dbname=info["NAME"],
        autocommit=True,
    ) as admin:  # fmt: skip
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [info["NAME"]],
        )
    for _ in range(3):  # every connection the pool held was ended: each request still gets a live one
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            assert cursor.fetchone()[0] != pid
        connection.close()
