"""Helpers for being tests: a runtime wired to a fake gateway, and manage.py in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.db import connection

from singularity.being import lease
from singularity.being.actions import create_being
from singularity.being.runtime import Prices, Runtime
from singularity.models import Being

ROOT = Path(__file__).resolve().parents[2]


def make_being(name: str = "ada", **kwargs: Any) -> Being:
    return create_being(name, **kwargs)


def make_runtime(being: Being, gateway: Any, catalogue: Any, **kwargs: Any) -> Runtime:
    """A runtime holding the being's lease, as a host would."""
    owner = lease.owner_id("test")
    assert lease.acquire(being, owner)
    Being.objects.filter(pk=being.pk).update(status=Being.Status.RUNNING, host=Being.Host.CLI)
    being.status = Being.Status.RUNNING
    kwargs.setdefault("prices", Prices(0, 0, 0))  # type: ignore[arg-type]
    return Runtime(being, gateway=gateway, catalogue=catalogue, owner=owner, **kwargs)


def database_url() -> str:
    """A DATABASE_URL for a subprocess that points at the current test database."""
    info = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{info['NAME']}"
    user = info.get("USER") or ""
    password = f":{info['PASSWORD']}" if info.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{info.get('HOST') or '127.0.0.1'}:{info.get('PORT') or 5432}/{info['NAME']}"


def manage_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAMA_", "SINGULARITY_"))}
    env["DATABASE_URL"] = database_url()
    env["SINGULARITY_CYCLE_INTERVAL_SECS"] = "0"
    env.update(extra)
    return env


def manage(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py`` with ``args`` against the test database and return the finished process."""
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env or manage_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def spawn(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
