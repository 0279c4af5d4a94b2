#!/usr/bin/env python
"""Time pages through a real web server, with and without the pool of Postgres connections (issue 18).

``bench/dashboard_scale.py`` times pages in the server through Django's test client, which keeps one connection
open from request to request. A real server does not: each request ends by closing its connection, and without a
pool the next one opens a fresh one — a new Postgres process that connects, authenticates and warms its caches of
the tables it reads before its first statement runs. This bench starts ``manage.py runserver`` (what ``make run``
serves) on the data set ``dashboard_scale.py`` built, logs in with a session, and times each page over HTTP, with
``SINGULARITY_DB_POOL`` off then on, ``--rounds`` times alternately, keeping each page's best p50 and p95:

    .venv/bin/python bench/real_server.py --pg-url postgres://postgres@127.0.0.1:5432/dash_1m
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (
    ("login page (floor)", "/accounts/login/", {}),
    ("/beings/", "/beings/", {}),
    ("/evolution/needs-you/count/", "/evolution/needs-you/count/", {"HX-Request": "true"}),
    ("/evolution/needs-you/", "/evolution/needs-you/", {}),
    ("/evolution/ HTMX table", "/evolution/", {"HX-Request": "true"}),
    ("/evolution/ (fleet)", "/evolution/", {}),
    ("/inbox/", "/inbox/", {}),
    ("/api/loop/status/", "/api/loop/status/", {}),
)

#: Run in the data set's environment: a session of the bench's user, printed as its key.
LOGIN = """
import django; django.setup()
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
user = get_user_model().objects.get(username="alice")
session = SessionStore()
session[SESSION_KEY], session[BACKEND_SESSION_KEY] = str(user.pk), "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.save()
print(session.session_key)
"""


def time_pages(env: dict[str, str], port: int, session: str, requests: int) -> dict[str, tuple[float, float, int]]:
    """Start a server with ``env``, time every page ``requests`` times after a warm-up: {label: (p50, p95, status)}."""
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2).read()
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise SystemExit("the server did not answer within 30 s")
        answer = {}
        for label, path, headers in PAGES:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}{path}", headers={"Cookie": f"sessionid={session}", **headers}
            )
            for _ in range(3):
                urllib.request.urlopen(request).read()
            spent = []
            for _ in range(requests):
                started = time.perf_counter()
                with urllib.request.urlopen(request) as response:
                    response.read()
                    status = response.status
                spent.append((time.perf_counter() - started) * 1000)
            spent.sort()
            answer[label] = (spent[len(spent) // 2], spent[min(len(spent) - 1, round(0.95 * len(spent)) - 1)], status)
        return answer
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/dash_1m")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    env = dict(
        os.environ,
        DATABASE_URL=args.pg_url,
        SINGULARITY_VAR_DIR=tempfile.mkdtemp(prefix="bench-var-"),
        CELERY_BROKER_URL="memory://localhost/",
        LOG_LEVEL="WARNING",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_SETTINGS_MODULE="singularity.settings",
    )
    session = subprocess.run(
        [sys.executable, "-c", LOGIN], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    best: dict[str, dict[str, list[float]]] = {"false": {}, "true": {}}
    for _ in range(args.rounds):
        for pool in ("false", "true"):
            for label, (p50, p95, status) in time_pages(
                {**env, "SINGULARITY_DB_POOL": pool}, args.port, session, args.requests
            ).items():
                if status != 200:
                    raise SystemExit(f"{label}: status {status}")
                kept = best[pool].setdefault(label, [p50, p95])
                kept[0], kept[1] = min(kept[0], p50), min(kept[1], p95)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| page | no pool p50 / p95 ms | pool p50 / p95 ms | saved (p50) |")
    print("|---|---:|---:|---:|")
    for label, *_ in PAGES:
        off, on = best["false"][label], best["true"][label]
        print(f"| {label} | {off[0]:.1f} / {off[1]:.1f} | {on[0]:.1f} / {on[1]:.1f} | {off[0] - on[0]:.1f} ms |")


if __name__ == "__main__":
    main()
