"""``manage.py up`` serves through gunicorn, for real: a page, /healthz, /readyz, /static/, a bad Content-Length.

The server is started in a subprocess on a free port with the embedded
defaults in a folder of its own — not mocked — and reached over HTTP.
"""

from __future__ import annotations

import socket
import time

import httpx

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


def test_up_serves_through_gunicorn_and_says_so_only_once_the_port_answers(tmp_path):
    env = environment(tmp_path / "var")
    migrated = manage(env, "migrate", "--noinput", "-v0")
    assert migrated.returncode == 0, migrated.stderr
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
    out = "".join(up.out)
    assert "runserver" not in out and "development server" not in out.lower()
    assert "Starting gunicorn" in out


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
