"""The forge's settings read from the environment: which forge, and GitHub's repository, credential and webhook.

``read_forge()`` returns them as a dict of settings names; a bad value fails
at boot with ImproperlyConfigured naming the variable. Under
``LOOP_FORGE=github`` a repository and one credential lane are required:
``GITHUB_TOKEN`` (or ``GITHUB_TOKEN_FILE``) first — else ``GH_TOKEN`` (or ``GH_TOKEN_FILE``), the
name the seed and GitHub's own CLI use — a GitHub App second
(``GITHUB_APP_ID``, ``GITHUB_APP_PRIVATE_KEY_FILE``, ``GITHUB_APP_INSTALLATION_ID``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from singularity.env import env_float, env_int, env_secret, env_str

FORGES = ("local", "github")
PUBLIC_API = "https://api.github.com"
_REPOSITORY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
_APP_VARS = ("GITHUB_APP_ID", "GITHUB_APP_PRIVATE_KEY_FILE", "GITHUB_APP_INSTALLATION_ID")


def git_remote(api_url: str, repository: str) -> str:
    """The HTTPS git URL of ``repository`` on the GitHub that serves ``api_url`` (github.com or a GHES host)."""
    parts = urlsplit(api_url)
    host = "github.com" if parts.netloc == "api.github.com" else parts.netloc
    prefix = parts.path.rstrip("/").removesuffix("/api/v3").removesuffix("/api")
    return f"{parts.scheme}://{host}{prefix}/{repository}.git"


def _api_url(environ: dict[str, str] | None) -> str:
    url = env_str("GITHUB_API_URL", PUBLIC_API, environ).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ImproperlyConfigured(
            f"GITHUB_API_URL: expected the API's http(s) address (https://api.github.com, or "
            f"https://<host>/api/v3 for GitHub Enterprise Server), got {url!r}"
        )
    return url


def _app(environ: dict[str, str] | None) -> tuple[int, str, int]:
    """The App lane's three values (0, "", 0 when none is set); all three or none."""
    app_id = env_int("GITHUB_APP_ID", 0, minimum=1, environ=environ)
    key_file = env_str("GITHUB_APP_PRIVATE_KEY_FILE", "", environ)
    installation = env_int("GITHUB_APP_INSTALLATION_ID", 0, minimum=1, environ=environ)
    given = [name for name, value in zip(_APP_VARS, (app_id, key_file, installation), strict=True) if value]
    if given and len(given) != len(_APP_VARS):
        missing = [name for name in _APP_VARS if name not in given]
        raise ImproperlyConfigured(
            f"{missing[0]}: the GitHub App lane needs {', '.join(_APP_VARS)}; {', '.join(given)} "
            f"{'is' if len(given) == 1 else 'are'} set but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not"
        )
    if key_file:
        path = Path(key_file)
        if not path.is_file():
            raise ImproperlyConfigured(f"GITHUB_APP_PRIVATE_KEY_FILE: no such file {key_file!r}")
        try:
            head = path.read_text()[:100]
        except (OSError, UnicodeDecodeError) as exc:
            raise ImproperlyConfigured(f"GITHUB_APP_PRIVATE_KEY_FILE: cannot read {key_file!r}: {exc}") from None
        if "PRIVATE KEY-----" not in head:
            raise ImproperlyConfigured(
                f"GITHUB_APP_PRIVATE_KEY_FILE: {key_file!r} is not a PEM private key (the .pem GitHub generated "
                "for the App)"
            )
    return app_id, key_file, installation


def read_forge(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Every forge setting by its settings name, validated; ImproperlyConfigured naming the variable at fault."""
    forge = env_str("LOOP_FORGE", "local", environ)
    if forge not in FORGES:
        raise ImproperlyConfigured(f"LOOP_FORGE: expected one of {', '.join(FORGES)}, got {forge!r}")
    repository = env_str("GITHUB_REPOSITORY", "", environ)
    if repository and not _REPOSITORY.fullmatch(repository):
        raise ImproperlyConfigured(
            f"GITHUB_REPOSITORY: expected owner/name (the brain's repository), got {repository!r}"
        )
    token_var = "GITHUB_TOKEN"
    token = env_secret("GITHUB_TOKEN", "", environ)
    if not token:
        token = env_secret("GH_TOKEN", "", environ)
        token_var = "GH_TOKEN" if token else token_var
    if any(ch.isspace() for ch in token):
        raise ImproperlyConfigured(f"{token_var}: the token has whitespace inside it (a pasted line break?)")
    app_id, key_file, installation = _app(environ)
    values: dict[str, Any] = {
        "LOOP_FORGE": forge,
        "GITHUB_API_URL": _api_url(environ),
        "GITHUB_REPOSITORY": repository,
        "GITHUB_TOKEN": token,
        "GITHUB_TOKEN_VAR": token_var,
        "GITHUB_APP_ID": app_id,
        "GITHUB_APP_PRIVATE_KEY_FILE": key_file,
        "GITHUB_APP_INSTALLATION_ID": installation,
        "GITHUB_WEBHOOK_SECRET": env_secret("GITHUB_WEBHOOK_SECRET", "", environ),
        "GITHUB_TIMEOUT_SECS": env_float("GITHUB_TIMEOUT_SECS", 15.0, minimum=1.0, environ=environ),
        "GITHUB_RETRIES": env_int("GITHUB_RETRIES", 4, minimum=0, maximum=10, environ=environ),
        "GITHUB_RETRY_BACKOFF_SECS": env_float("GITHUB_RETRY_BACKOFF_SECS", 1.0, environ=environ),
        "GITHUB_RETRY_MAX_WAIT_SECS": env_float("GITHUB_RETRY_MAX_WAIT_SECS", 60.0, environ=environ),
        "GITHUB_SECONDS_BETWEEN_WRITES": env_float("GITHUB_SECONDS_BETWEEN_WRITES", 1.0, environ=environ),
    }
    if forge == "github":
        if not repository:
            raise ImproperlyConfigured(
                "GITHUB_REPOSITORY: LOOP_FORGE=github needs the brain's repository as owner/name"
            )
        if not token and not app_id:
            raise ImproperlyConfigured(
                "GITHUB_TOKEN: LOOP_FORGE=github needs a credential — GITHUB_TOKEN or GH_TOKEN (or their _FILE), or a "
                f"GitHub App ({', '.join(_APP_VARS)})"
            )
    return values
