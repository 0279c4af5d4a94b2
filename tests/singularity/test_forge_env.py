"""The forge's settings from the environment: a bad value fails at boot naming the variable (STYLE 14, issue 17)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from singularity.forge_env import git_remote, read_forge

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIB...\n-----END RSA PRIVATE KEY-----\n"


def github(**extra: str) -> dict[str, str]:
    return {"LOOP_FORGE": "github", "GITHUB_REPOSITORY": "acme/brain", "GITHUB_TOKEN": "ghp_x", **extra}


def test_the_embedded_default_is_the_local_forge_and_the_public_api():
    values = read_forge({})
    assert values["LOOP_FORGE"] == "local" and values["GITHUB_API_URL"] == "https://api.github.com"
    assert values["GITHUB_TOKEN"] == "" and values["GITHUB_APP_ID"] == 0


def test_github_on_a_token_reads_the_repository_and_the_secrets_from_files(tmp_path):
    token, secret = tmp_path / "token", tmp_path / "secret"
    token.write_text("ghp_from_a_file\n")
    secret.write_text("hook-secret\n")
    values = read_forge(github(GITHUB_TOKEN="", GITHUB_TOKEN_FILE=str(token), GITHUB_WEBHOOK_SECRET_FILE=str(secret)))
    assert values["GITHUB_TOKEN"] == "ghp_from_a_file" and values["GITHUB_WEBHOOK_SECRET"] == "hook-secret"
    assert values["GITHUB_REPOSITORY"] == "acme/brain"


def test_github_on_an_app_needs_its_three_values_and_a_pem_key(tmp_path):
    key = tmp_path / "app.pem"
    key.write_text(PEM)
    app = {"GITHUB_APP_ID": "12", "GITHUB_APP_PRIVATE_KEY_FILE": str(key), "GITHUB_APP_INSTALLATION_ID": "34"}
    values = read_forge(github(GITHUB_TOKEN="", **app))
    assert (values["GITHUB_APP_ID"], values["GITHUB_APP_INSTALLATION_ID"]) == (12, 34)
    with pytest.raises(ImproperlyConfigured, match="^GITHUB_APP_INSTALLATION_ID: the GitHub App lane needs"):
        read_forge(github(GITHUB_TOKEN="", GITHUB_APP_ID="12", GITHUB_APP_PRIVATE_KEY_FILE=str(key)))
    key.write_text("not a key")
    with pytest.raises(ImproperlyConfigured, match="^GITHUB_APP_PRIVATE_KEY_FILE: .* is not a PEM private key"):
        read_forge(github(GITHUB_TOKEN="", **app))


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"LOOP_FORGE": "gitlab"}, "LOOP_FORGE"),
        (github(GITHUB_REPOSITORY="just-a-name"), "GITHUB_REPOSITORY"),
        (github(GITHUB_REPOSITORY=""), "GITHUB_REPOSITORY"),
        (github(GITHUB_TOKEN=""), "GITHUB_TOKEN"),
        (github(GITHUB_TOKEN="ghp_a\nghp_b"), "GITHUB_TOKEN"),
        (github(GITHUB_TOKEN_FILE="/nonexistent/token"), "GITHUB_TOKEN_FILE"),
        (github(GITHUB_API_URL="api.github.com"), "GITHUB_API_URL"),
        (github(GITHUB_API_URL="ftp://ghe.example/api/v3"), "GITHUB_API_URL"),
        (github(GITHUB_APP_ID="twelve"), "GITHUB_APP_ID"),
        (github(GITHUB_APP_ID="0"), "GITHUB_APP_ID"),
        (
            github(
                GITHUB_APP_PRIVATE_KEY_FILE="/nonexistent/app.pem", GITHUB_APP_ID="1", GITHUB_APP_INSTALLATION_ID="2"
            ),
            "GITHUB_APP_PRIVATE_KEY_FILE",
        ),
        (github(GITHUB_WEBHOOK_SECRET_FILE="/nonexistent/secret"), "GITHUB_WEBHOOK_SECRET_FILE"),
        (github(GITHUB_RETRIES="many"), "GITHUB_RETRIES"),
        (github(GITHUB_TIMEOUT_SECS="0"), "GITHUB_TIMEOUT_SECS"),
    ],
)
def test_a_bad_value_fails_naming_the_variable(environ, variable):
    with pytest.raises(ImproperlyConfigured) as bad:
        read_forge(environ)
    assert str(bad.value).startswith(f"{variable}:"), str(bad.value)


def test_the_git_remote_follows_the_api_address():
    assert git_remote("https://api.github.com", "acme/brain") == "https://github.com/acme/brain.git"
    assert git_remote("https://ghe.example/api/v3", "acme/brain") == "https://ghe.example/acme/brain.git"
    assert git_remote("http://127.0.0.1:8080/api/v3", "a/b") == "http://127.0.0.1:8080/a/b.git"


def test_the_settings_module_refuses_to_boot_on_a_bad_value_naming_it(tmp_path):
    code = "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'singularity.settings'; django.setup()"
    env = {
        "PATH": "/usr/bin:/bin",
        "LOOP_FORGE": "github",
        "GITHUB_REPOSITORY": "acme/brain",
        "SINGULARITY_VAR_DIR": str(tmp_path),
    }
    booted = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert booted.returncode != 0 and "GITHUB_TOKEN: LOOP_FORGE=github needs a credential" in booted.stderr
    env["GITHUB_TOKEN"] = "ghp_x"
    booted = subprocess.run(
        [sys.executable, "-c", code + "; from django.conf import settings; print(settings.BRAIN_REPO)"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert booted.returncode == 0, booted.stderr
    assert booted.stdout.strip() == "https://github.com/acme/brain.git"
