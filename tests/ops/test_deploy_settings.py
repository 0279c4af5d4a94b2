"""TLS and cookies come from the environment; under the documented production environment (deploy/production.env)
``check --deploy`` reports nothing; production refuses the development secret key."""

from __future__ import annotations

import subprocess
import sys

from singularity.settings import BASE_DIR
from tests.ops.server import environment

DOCUMENTED = BASE_DIR / "deploy" / "production.env"


def documented_env() -> dict[str, str]:
    values = {}
    for line in DOCUMENTED.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=180
    )


def test_check_deploy_reports_nothing_under_the_documented_environment(tmp_path):
    env = environment(tmp_path / "var", **documented_env())
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"  # check --deploy reads settings, not the server
    done = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_without_it_check_deploy_warns_about_tls_and_cookies(tmp_path):
    done = manage(environment(tmp_path / "var"), "check", "--deploy")
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in done.stdout + done.stderr


def test_production_refuses_the_development_secret_key_in_one_line_naming_it(tmp_path):
    env = environment(tmp_path / "var", **documented_env())
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    del env["SECRET_KEY"]
    done = manage(env, "check")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("configuration error: SECRET_KEY: production")


def test_a_malformed_proxy_header_is_refused_naming_it(tmp_path):
    done = manage(environment(tmp_path / "var", SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto"), "check")
    assert done.returncode == 2 and "SECURE_PROXY_SSL_HEADER: expected HEADER=value" in done.stderr


def test_the_proxy_header_and_hsts_reach_a_response(tmp_path):
    script = (
        "import django; django.setup()\n"
        "from django.test import Client\n"
        "c = Client()\n"
        "plain = c.get('/healthz', HTTP_HOST='singularity.example.org')\n"
        "page = c.get('/accounts/login/', HTTP_HOST='singularity.example.org')\n"
        "tls = c.get('/accounts/login/', HTTP_HOST='singularity.example.org', HTTP_X_FORWARDED_PROTO='https')\n"
        "print(plain.status_code, page.status_code, page.get('Location'), tls.status_code,"
        " tls.get('Strict-Transport-Security'), tls.cookies['csrftoken']['secure'])\n"
    )
    env = environment(tmp_path / "var", **documented_env(), DJANGO_SETTINGS_MODULE="singularity.settings")
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    done = subprocess.run([sys.executable, "-c", script], cwd=BASE_DIR, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "200",  # the probe is never redirected
        "301",
        "https://singularity.example.org/accounts/login/",
        "200",
        "max-age=31536000;",
        "includeSubDomains;",
        "preload",
        "True",
    ]
