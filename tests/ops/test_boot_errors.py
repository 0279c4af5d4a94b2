"""Boot errors name their variable: a database that does not exist or a server or broker that cannot be reached is
one line naming DATABASE_URL or CELERY_BROKER_URL and what to do, exit 2 (was an 87-line traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from singularity.settings import BASE_DIR
from tests.ops.server import environment


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def postgres_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=180
    )


@pytest.mark.skipif(not postgres_answers(), reason="needs a Postgres server on 127.0.0.1:5432")
def test_migrate_on_a_database_that_does_not_exist_names_database_url_and_says_create_it(tmp_path):
    env = environment(tmp_path / "var", DATABASE_URL="postgres://postgres@127.0.0.1:5432/no_such_db_issue37")
    done = manage(env, "migrate", "--noinput")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("DATABASE_URL: cannot connect to the database")
    assert 'database "no_such_db_issue37" does not exist' in line and "create it" in line


def test_migrate_against_a_server_that_is_not_there_names_database_url(tmp_path):
    env = environment(tmp_path / "var", DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/singularity")
    done = manage(env, "migrate", "--noinput")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("DATABASE_URL: cannot connect to the database") and "start the database server" in line


def test_up_with_the_broker_unreachable_names_celery_broker_url(tmp_path):
    env = environment(tmp_path / "var", CELERY_BROKER_URL=f"redis://127.0.0.1:{closed_port()}/0")
    assert manage(env, "migrate", "--noinput", "-v0").returncode == 0
    done = manage(env, "up", "--port", str(closed_port()), "--no-demo")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("CELERY_BROKER_URL: cannot reach the broker") and "start Redis" in line
    assert "Singularity is up" not in done.stdout


def test_up_with_the_database_unreachable_names_database_url(tmp_path):
    env = environment(tmp_path / "var", DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/x")
    done = manage(env, "up", "--port", str(closed_port()), "--no-demo")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("DATABASE_URL: ")
