"""``manage.py up`` serves through gunicorn, for real: a page, /healthz, /readyz, /static/, a bad Content-Length.

The server is started in a subprocess on a free port with the embedded
defaults in a folder of its own — not mocked — and reached over HTTP.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.ops.server import environment, manage, running_up


def raw_request(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def metric(client: httpx.Client, url: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(client.get(url).text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def reported_run() -> dict[str, object]:
    return {
        "entity": "scenario:triage",
        "status": "succeeded",
        "startedAt": "2026-03-01T11:00:00Z",
        "completedAt": "2026-03-01T11:00:05Z",
        "costUsd": "0.01",
        "input": {"ticket": "my invoice is wrong", "_label": "billing"},
        "output": {"label": "billing"},
    }


def test_up_serves_through_gunicorn_and_says_so_only_once_the_port_answers(tmp_path):
    env = environment(tmp_path / "var", LOG_FORMAT="json", DJANGO_SUPERUSER_PASSWORD="admin-password-37")
    migrated = manage(env, "migrate", "--noinput", "-v0")
    assert migrated.returncode == 0, migrated.stderr
    made = manage(env, "createsuperuser", "--noinput", "--username", "admin", "--email", "admin@example.org")
    assert made.returncode == 0, made.stderr
    token = manage(env, "api_token", "--user", "admin", "--name", "script").stdout.strip().splitlines()[-1]
    with running_up(env) as up:
        up.wait_up(timeout=240)
        assert up.answered_when_announced is True
        with httpx.Client(timeout=30) as client:
            login = client.get(up.url("/accounts/login/"))
            assert login.status_code == 200 and "gunicorn" in login.headers.get("server", "")
            assert "X-Request-ID" in login.headers
            health = client.get(up.url("/healthz"))
            assert health.status_code == 200 and health.json() == {"status": "ok"}
            static = client.get(up.url("/static/favicon.svg"))
            assert static.status_code == 200 and b"<svg" in static.content
            # A Content-Length that is not a number: refused by the server, not a 500.
            bad = b"POST /api/runs/report/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n"
            answer = raw_request(up.port, bad)
            assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
            # Every queue's worker and beat come up: ready.
            deadline = time.monotonic() + 240
            while True:
                ready = client.get(up.url("/readyz"))
                if ready.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(2)
            assert ready.status_code == 200, ready.text
            assert set(ready.json()["checks"]) == {"database", "broker", "brain", "beat", "workers"}
            # Runs reported through the API move the counters /metrics shows, whichever process served them.
            metrics = up.url("/metrics")
            before = metric(client, metrics, "singularity_runs_ingested_total", source="api")
            reported = client.post(
                up.url("/api/runs/report/"),
                json=[reported_run(), reported_run()],
                headers={"Authorization": f"Bearer {token}"},
            )
            assert reported.status_code == 201, reported.text
            assert metric(client, metrics, "singularity_runs_ingested_total", source="api") == before + 2
            timed = metric(
                client,
                metrics,
                "singularity_http_request_duration_seconds_count",
                view="api-grading-runs-report",
                method="POST",
                status="201",
            )
            assert timed >= 1
    out = "".join(up.out)
    assert "runserver" not in out and "development server" not in out.lower()
    # LOG_FORMAT=json: every line every process logged is one JSON object.
    lines = [line for line in up.errors.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]
    assert any(r["message"].startswith("Starting gunicorn") for r in records)
    # The API's documented parameters were read in the master, before any worker was forked.
    assert any(r["message"].startswith("API schema read:") for r in records)
    assert any(r["logger"].startswith("celery") for r in records)


def test_a_second_up_on_a_busy_port_names_it_and_exits_2(tmp_path):
    env = environment(tmp_path / "var")
    assert manage(env, "migrate", "--noinput", "-v0").returncode == 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = manage(env, "up", "--port", str(port), "--no-demo", timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("PORT: something already answers")
