"""A fake Brama: a real chat-completions server on loopback, scripted per test.

Drive it with the real client (``fake.gateway()`` or ``BRAMA_BASE_URL =
fake.base_url``): ``fake.script(Reply(...), ...)`` queues answers in order,
or ``fake.handler = callable`` answers every request. Every request is kept
in ``fake.requests``. When the script runs out it answers plain text "done".
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from singularity.demo_model import ChatCompletionsServer, Reply
from singularity.gateway import Gateway

__all__ = ["FakeGateway", "RecordedRequest", "Reply"]


@dataclass(frozen=True)
class RecordedRequest:
    json: dict[str, Any]
    #: Header names in lower case.
    headers: dict[str, str]
    #: The request body exactly as received (what a signature covers).
    body: bytes


class FakeGateway(ChatCompletionsServer):
    """A ChatCompletionsServer answering from a script, or from ``handler`` when one is set."""

    def __init__(self) -> None:
        super().__init__(handler=None)
        self.requests: list[RecordedRequest] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._gateways: list[Gateway] = []
        #: What ``GET /v1/models`` lists; empty (the default) says nothing about what is served.
        self.models: list[str] = []
        #: How many times the model list was asked for.
        self.model_list_requests = 0

    def list_models(self) -> list[str]:
        with self._lock:
            self.model_list_requests += 1
            return list(self.models)

    def respond(self, request_json: dict[str, Any], headers: dict[str, str], body: bytes) -> Reply:
        with self._lock:
            self.requests.append(RecordedRequest(json=request_json, headers=headers, body=body))
            handler = self.handler
            scripted = self._script.popleft() if handler is None and self._script else None
        if handler is not None:
            return handler(request_json, headers)
        return scripted if scripted is not None else Reply(content="done")

    def script(self, *replies: Reply) -> FakeGateway:
        """Queue replies to answer the next requests in order; return self."""
        with self._lock:
            self._script.extend(replies)
        return self

    @property
    def remaining(self) -> int:
        """Return how many scripted replies have not been used yet."""
        with self._lock:
            return len(self._script)

    def gateway(self, **kwargs: Any) -> Gateway:
        """Return a real Gateway pointed at this fake (api key "test-key", no retries unless given), closed on stop."""
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 10)
        gateway = Gateway(self.base_url, kwargs.pop("api_key", "test-key"), **kwargs)
        self._gateways.append(gateway)
        return gateway

    def stop(self) -> None:
        """Close the gateways handed out, then stop the server."""
        for gateway in self._gateways:
            gateway.close()
        self._gateways.clear()
        super().stop()
