"""A fake Telegram Bot API: a real HTTP server on loopback, driven by the real python-telegram-bot client.

Point ``TELEGRAM_API_URL`` at ``fake.api_url``. It answers ``POST
/bot<token>/<method>`` for getMe, sendMessage, editMessageText,
answerCallbackQuery, getUpdates, setWebhook and deleteWebhook, keeps every
call in ``fake.calls`` and every message it "sent" in ``fake.messages``.
``fake.fail(method, status, description, retry_after=…)`` scripts the next
answers of a method as errors, shaped as Telegram shapes them. Updates for
``getUpdates`` are queued with ``fake.push(update)``; ``fake.press(…)`` and
``fake.reply(…)`` build the updates a person's button press or reply makes.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qsl

TOKEN = "123456:TEST-TOKEN"
BOT_ID = 123456
CHAT_ID = -1001234
BOT_USER = {"id": BOT_ID, "is_bot": True, "first_name": "Singularity", "username": "singularity_bot"}


@dataclass(frozen=True)
class Call:
    method: str
    params: dict[str, Any]


@dataclass
class Failure:
    status: int
    description: str
    retry_after: int | None = None


@dataclass
class _State:
    calls: list[Call] = field(default_factory=list)
    messages: dict[int, dict[str, Any]] = field(default_factory=dict)
    failures: dict[str, deque[Failure]] = field(default_factory=dict)
    updates: list[dict[str, Any]] = field(default_factory=list)
    webhook: dict[str, Any] = field(default_factory=dict)


_TEXT_FIELDS = {"text", "callback_query_id", "secret_token", "url"}


def _decode(name: str, value: str) -> Any:
    """Form fields carry JSON for objects and numbers; text fields stay text."""
    if name in _TEXT_FIELDS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the base class's name
        return

    def do_POST(self) -> None:  # noqa: N802 — the base class's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Type", "").startswith("application/json"):
            params = json.loads(body or b"{}")
        else:
            params = {k: _decode(k, v) for k, v in parse_qsl(body.decode(), keep_blank_values=True)}
        status, payload = self.server.owner.answer(self.path, params)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeTelegram


class FakeTelegram:
    """The Bot API on 127.0.0.1, with scripted failures and a record of every call."""

    def __init__(self, token: str = TOKEN, chat_id: int = CHAT_ID) -> None:
        self.token = token
        self.chat_id = chat_id
        self._state = _State()
        self._lock = threading.Lock()
        self._message_ids = itertools.count(1001)
        self._update_ids = itertools.count(500001)
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- The server ---------------------------------------------------------

    def start(self) -> Self:
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-telegram", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def api_url(self) -> str:
        """Return the base URL for ``TELEGRAM_API_URL`` (the client appends the token)."""
        assert self._httpd is not None, "the fake Telegram is not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/bot"

    # --- Scripting and reading ----------------------------------------------

    def fail(
        self, method: str, status: int, description: str, *, retry_after: int | None = None, times: int = 1
    ) -> None:
        """Answer the next ``times`` calls of ``method`` with an error like Telegram's."""
        with self._lock:
            queue = self._state.failures.setdefault(method, deque())
            queue.extend(Failure(status, description, retry_after) for _ in range(times))

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        """Return the parameters of every call of ``method``, oldest first."""
        with self._lock:
            return [c.params for c in self._state.calls if c.method == method]

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._state.calls)

    @property
    def messages(self) -> dict[int, dict[str, Any]]:
        """Return the messages as they stand now (after edits), by message id."""
        with self._lock:
            return {k: dict(v) for k, v in self._state.messages.items()}

    @property
    def webhook(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._state.webhook)

    def push(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates and return it."""
        with self._lock:
            self._state.updates.append(update)
        return update

    # --- Updates a person makes ---------------------------------------------

    def _user(self, user_id: int, *, is_bot: bool = False) -> dict[str, Any]:
        return {"id": user_id, "is_bot": is_bot, "first_name": f"user{user_id}"}

    def press(self, message_id: int, data: str, *, user_id: int, is_bot: bool = False) -> dict[str, Any]:
        """Return the update a press of the button ``data`` under message ``message_id`` makes."""
        message = self.messages[message_id]
        return {
            "update_id": next(self._update_ids),
            "callback_query": {
                "id": f"cq{message_id}-{user_id}-{time.monotonic_ns()}",
                "from": self._user(user_id, is_bot=is_bot),
                "chat_instance": "ci-1",
                "data": data,
                "message": {
                    "message_id": message_id,
                    "date": int(time.time()),
                    "chat": {"id": message["chat_id"], "type": "supergroup", "title": "HITL"},
                    "from": BOT_USER,
                    "text": message["text"],
                },
            },
        }

    def reply(self, message_id: int, text: str, *, user_id: int, is_bot: bool = False) -> dict[str, Any]:
        """Return the update a native reply with ``text`` to message ``message_id`` makes."""
        message = self.messages[message_id]
        chat = {"id": message["chat_id"], "type": "supergroup", "title": "HITL"}
        return {
            "update_id": next(self._update_ids),
            "message": {
                "message_id": next(self._message_ids),
                "date": int(time.time()),
                "chat": chat,
                "from": BOT_USER if is_bot else self._user(user_id),
                "text": text,
                "reply_to_message": {
                    "message_id": message_id,
                    "date": int(time.time()),
                    "chat": chat,
                    "from": BOT_USER,
                    "text": message["text"],
                },
            },
        }

    # --- The Bot API --------------------------------------------------------

    def answer(self, path: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Return the HTTP status and JSON body for a call to ``path``."""
        prefix = f"/bot{self.token}/"
        if not path.startswith(prefix):
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        method = path[len(prefix) :]
        with self._lock:
            self._state.calls.append(Call(method, params))
            queue = self._state.failures.get(method)
            failure = queue.popleft() if queue else None
        if failure is not None:
            body: dict[str, Any] = {"ok": False, "error_code": failure.status, "description": failure.description}
            if failure.retry_after is not None:
                body["parameters"] = {"retry_after": failure.retry_after}
            return failure.status, body
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return 404, {"ok": False, "error_code": 404, "description": "Not Found: method not found"}
        return 200, {"ok": True, "result": handler(params)}

    def _api_getMe(self, params: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        return BOT_USER

    def _message(self, message_id: int, chat_id: int, text: str, markup: Any) -> dict[str, Any]:
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "supergroup", "title": "HITL"},
            "from": BOT_USER,
            "text": text,
        }
        if markup:
            message["reply_markup"] = markup
        return message

    def _api_sendMessage(self, params: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        chat_id = int(params["chat_id"])
        message_id = next(self._message_ids)
        markup = params.get("reply_markup")
        with self._lock:
            self._state.messages[message_id] = {
                "chat_id": chat_id,
                "text": params["text"],
                "reply_markup": markup,
                "reply_parameters": params.get("reply_parameters"),
            }
        return self._message(message_id, chat_id, params["text"], markup)

    def _api_editMessageText(self, params: dict[str, Any]) -> dict[str, Any] | bool:  # noqa: N802
        message_id = int(params["message_id"])
        with self._lock:
            stored = self._state.messages.get(message_id)
            if stored is None:
                return True
            stored.update(text=params["text"], reply_markup=params.get("reply_markup"))
        return self._message(message_id, stored["chat_id"], params["text"], params.get("reply_markup"))

    def _api_answerCallbackQuery(self, params: dict[str, Any]) -> bool:  # noqa: N802
        return True

    def _api_getUpdates(self, params: dict[str, Any]) -> list[dict[str, Any]]:  # noqa: N802
        offset = int(params.get("offset") or 0)
        with self._lock:
            self._state.updates = [u for u in self._state.updates if u["update_id"] >= offset]
            return list(self._state.updates)

    def _api_setWebhook(self, params: dict[str, Any]) -> bool:  # noqa: N802
        with self._lock:
            self._state.webhook = dict(params)
        return True

    def _api_deleteWebhook(self, params: dict[str, Any]) -> bool:  # noqa: N802
        with self._lock:
            self._state.webhook = {}
        return True
