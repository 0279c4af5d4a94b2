"""Loopback receivers for outbound notifications: a Slack incoming webhook and a generic webhook endpoint.

The Slack one speaks Slack's documented incoming-webhook contract
(https://api.slack.com/messaging/webhooks#handling_errors): 200 ``ok`` for a message; 400 ``invalid_payload`` for a
body that is not JSON, 400 ``no_text`` for one with neither ``text`` nor ``blocks``; 404 ``no_service`` for a
webhook path it does not know (disabled or revoked); 429 ``rate_limited`` with ``Retry-After`` when told to. The
generic one records the raw body and headers and answers what it is scripted to.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

SLACK_PATH = "/services/T0001/B0001/XXXXXXXXXXXXXXXX"


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the base class's name
        return

    def do_POST(self) -> None:  # noqa: N802 — the base class's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        got = Received(self.path, {k: v for k, v in self.headers.items()}, body)
        status, text, headers = self.server.owner.answer(got)
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: _Receiver


class _Receiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        #: Scripted answers, used before the normal one: (status, text, headers).
        self.script: list[tuple[int, str, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._httpd: _Server | None = None

    def start(self) -> Self:
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def fail_next(self, status: int, text: str = "", headers: dict[str, str] | None = None) -> None:
        self.script.append((status, text, headers or {}))

    def answer(self, got: Received) -> tuple[int, str, dict[str, str]]:
        with self._lock:
            self.received.append(got)
            if self.script:
                return self.script.pop(0)
        return self.normal(got)

    def normal(self, got: Received) -> tuple[int, str, dict[str, str]]:
        return 200, "", {}


class FakeSlack(_Receiver):
    """Slack's incoming webhooks on 127.0.0.1."""

    @property
    def url(self) -> str:
        return self.base + SLACK_PATH

    def messages(self) -> list[dict[str, Any]]:
        """The messages Slack accepted (the requests it answered ``ok``)."""
        return [r.json() for r in self._ok]

    def __init__(self) -> None:
        super().__init__()
        self._ok: list[Received] = []

    def answer(self, got: Received) -> tuple[int, str, dict[str, str]]:
        status, text, headers = super().answer(got)
        if status == 200:
            with self._lock:
                self._ok.append(got)
        return status, text, headers

    def normal(self, got: Received) -> tuple[int, str, dict[str, str]]:
        if got.path != SLACK_PATH:
            return 404, "no_service", {}
        try:
            message = json.loads(got.body)
        except ValueError:
            return 400, "invalid_payload", {}
        if not isinstance(message, dict):
            return 400, "invalid_payload", {}
        if not message.get("text") and not message.get("blocks"):
            return 400, "no_text", {}
        blocks = message.get("blocks") or []
        if not isinstance(blocks, list) or not all(isinstance(b, dict) and b.get("type") for b in blocks):
            return 400, "invalid_blocks", {}
        return 200, "ok", {}

    def rate_limit_next(self, seconds: int) -> None:
        self.fail_next(429, "rate_limited", {"Retry-After": str(seconds)})


class FakeWebhook(_Receiver):
    """Any endpoint that takes the signed JSON webhook, recording what came."""

    @property
    def url(self) -> str:
        return self.base + "/hooks/singularity"
