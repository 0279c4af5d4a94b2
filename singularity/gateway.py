"""Brama, the LLM gateway: one chat completion over the OpenAI protocol.

This is the only module that imports ``openai``. It raises ``GatewayError``
(our ``UpstreamError``) marked permanent or transient, and refuses any reply
whose usage block cannot be debited honestly, so the caller never debits a
completion it cannot account for.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import httpcore
import httpx
import openai
from django.conf import settings

from singularity.errors import ConfigError, UpstreamError

if TYPE_CHECKING:
    from singularity.demo_model import ChatCompletionsServer

#: How long a gateway's model list is trusted before it is asked for again.
MODEL_LIST_CACHE_SECS = 300.0

#: Client errors that may pass on their own: request timeout and rate limit.
TRANSIENT_CLIENT_STATUSES = frozenset({408, 429})


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    #: The raw JSON text exactly as the model sent it; the caller parses it.
    arguments: str


@dataclass(frozen=True)
class Completion:
    content: str | None
    tool_calls: list[ToolCall]
    usage: Usage
    model: str
    #: Wall time of the whole call, SDK retries included.
    elapsed_ns: int
    #: The assistant message in OpenAI wire shape, ready to append to the conversation.
    message: dict[str, Any]
    #: Why the model stopped (the first choice's ``finish_reason``: stop, tool_calls, length…); "" when not sent.
    finish_reason: str = ""


class GatewayError(UpstreamError):
    """Brama failed or answered something we cannot account for.

    A completion refused for its usage block carries the block as received (``usage``) and the call's wall
    time (``elapsed_ns``), so the caller can record what the call cost though it debits nothing.
    """

    def __init__(self, message: str, *, permanent: bool, usage: object = None, elapsed_ns: int | None = None) -> None:
        super().__init__(message, permanent=permanent)
        self.usage = usage
        self.elapsed_ns = elapsed_ns


def _unsupported(detail: str) -> GatewayError:
    return GatewayError(f"brama: unsupported response: {detail}", permanent=True)


def sign(secret: bytes, agent_id: str, timestamp: str, body: bytes) -> str:
    """Return the lowercase hex HMAC-SHA256 of ``agent_id:timestamp:sha256_hex(body)``."""
    body_digest = hashlib.sha256(body).hexdigest()
    payload = f"{agent_id}:{timestamp}:{body_digest}".encode()
    return hmac.new(secret, payload, hashlib.sha256).hexdigest()


class _Signer:
    """An httpx request hook adding the agent headers and signature to every attempt."""

    def __init__(self, secret: bytes, agent_id: str) -> None:
        self.secret = secret
        self.agent_id = agent_id

    def __call__(self, request: httpx.Request) -> None:
        timestamp = str(int(time.time()))
        request.headers["x-agent-id"] = self.agent_id
        request.headers["x-agent-timestamp"] = timestamp
        request.headers["x-agent-signature"] = sign(self.secret, self.agent_id, timestamp, request.read())


def _drop_authorization(request: httpx.Request) -> None:
    request.headers.pop("authorization", None)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The TLS context every gateway of this process verifies with (httpx's default: certifi's bundle).

    Built once: loading the CA bundle costs some 100 ms of CPU, which a grade paid each time it made its gateway
    (issue 37). An SSLContext is safe to share between threads.
    """
    return httpx.create_ssl_context()


class _Watched(httpcore.NetworkStream):
    """A connection of an abortable gateway: every read and write goes to the stream; a TLS upgrade is watched too."""

    def __init__(self, stream: httpcore.NetworkStream, backend: _AbortableBackend) -> None:
        self._stream = stream
        self._backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, timeout)

    def close(self) -> None:
        self._backend.forget(self)
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        # The plain socket is handed to the TLS one (its descriptor moves): watch the new stream instead.
        self._backend.forget(self)
        return self._backend.watch(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)

    def shut(self) -> None:
        """Shut the socket both ways: a read blocked on it in another thread returns at once."""
        sock = self._stream.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: nothing is in flight on it
                sock.shutdown(socket.SHUT_RDWR)


class _AbortableBackend(httpcore.SyncBackend):
    """The network under one gateway: it keeps each open connection so ``abort`` can cut a call in flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[_Watched] = set()
        self.aborted = False

    def watch(self, stream: httpcore.NetworkStream) -> _Watched:
        watched = _Watched(stream, self)
        with self._lock:
            self._open.add(watched)
            aborted = self.aborted
        if aborted:
            watched.shut()
        return watched

    def forget(self, stream: _Watched) -> None:
        with self._lock:
            self._open.discard(stream)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        if self.aborted:
            raise httpcore.ConnectError("the gateway's calls were abandoned")
        return self.watch(super().connect_tcp(host, port, timeout, local_address, socket_options))

    def abort(self) -> None:
        """Cut every connection (the call in flight with it) and refuse new ones (the SDK's retries)."""
        with self._lock:
            self.aborted = True
            streams = list(self._open)
        for stream in streams:
            stream.shut()


def _make_abortable(client: httpx.Client, backend: _AbortableBackend) -> None:
    """Put ``backend`` under every transport of ``client`` (the direct one, and any proxy the environment mounts).

    httpcore's pool keeps its network backend as ``_network_backend``; should a release name it otherwise, the
    gateway still works and an abandoned call runs on to its end in its thread (tests/singularity/
    test_gateway_abort.py says so first).
    """
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if pool is not None and hasattr(pool, "_network_backend"):
            pool._network_backend = backend


class Gateway:
    """A chat-completions client for one Brama endpoint."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        hmac_secret: bytes | None = None,
        agent_id: str = "singularity",
        timeout: float = 120,
        max_retries: int = 2,
    ) -> None:
        self.base_url = base_url
        self.agent_id = agent_id
        request_hooks: list[Callable[[httpx.Request], None]] = []
        if not api_key:
            # A keyless gateway is allowed; the SDK insists on a key, so it gets a placeholder that never leaves.
            request_hooks.append(_drop_authorization)
        if hmac_secret:
            request_hooks.append(_Signer(hmac_secret, agent_id))
        self._http = httpx.Client(timeout=timeout, verify=_tls_context(), event_hooks={"request": request_hooks})
        self._network = _AbortableBackend()
        _make_abortable(self._http, self._network)
        #: (monotonic time fetched, model names) of the last ``GET /v1/models``.
        self._models: tuple[float, list[str]] | None = None
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or "no-key",
            # openai 3.x is typed for httpx2 but accepts an httpx.Client at runtime (tested).
            http_client=self._http,  # type: ignore[arg-type]
            max_retries=max_retries,
            timeout=timeout,
        )

    def close(self) -> None:
        self._client.close()

    def abort(self) -> None:
        """Abandon this gateway's calls in flight, from any thread: their connections are cut (the server sees the
        client go), the call raises ``GatewayError``, and no new call of this gateway is made (its retries too).
        """
        self._network.abort()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def complete(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Return one validated completion, or raise ``GatewayError`` (permanent or transient).

        ``tools`` is sent only when non-empty; ``response_format`` and ``max_tokens`` only when given.
        """
        extra: dict[str, Any] = {}
        if max_tokens is not None:
            extra["max_tokens"] = max_tokens
        if tools:
            extra["tools"] = tools
        if response_format is not None:
            extra["response_format"] = response_format
        started = time.perf_counter_ns()
        with self._translated_errors():
            raw = self._client.chat.completions.with_raw_response.create(
                model=model, messages=cast(Any, messages), **extra
            )
            body = raw.http_response.content
        elapsed_ns = time.perf_counter_ns() - started
        return parse_completion(body, requested_model=model, elapsed_ns=elapsed_ns)

    def ping(self) -> None:
        """Ask the gateway for its model list (costs nothing); raise ``GatewayError`` if it does not answer."""
        with self._translated_errors():
            self._client.models.with_raw_response.list()

    def served_models(self) -> list[str]:
        """The model names the gateway lists (``GET /v1/models``), cached for ``MODEL_LIST_CACHE_SECS``.

        Raises ``GatewayError`` when the list cannot be had; an empty list
        means the gateway does not say what it serves.
        """
        now = time.monotonic()
        if self._models is not None and now - self._models[0] < MODEL_LIST_CACHE_SECS:
            return list(self._models[1])
        with self._translated_errors():
            body = self._client.models.with_raw_response.list().http_response.content
        try:
            data = json.loads(body).get("data")
            names = [item["id"] for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)]
        except (ValueError, AttributeError, TypeError) as exc:
            raise _unsupported(f"the model list is not a list of models ({exc})") from exc
        self._models = (now, names)
        return list(names)

    @contextmanager
    def _translated_errors(self) -> Iterator[None]:
        """Turn the SDK's errors into ``GatewayError``, permanent or transient."""
        try:
            yield
        except openai.APIStatusError as exc:
            raise _status_error(exc) from exc
        except openai.APITimeoutError as exc:
            raise GatewayError(f"brama: timed out calling {self.base_url}", permanent=False) from exc
        except openai.APIConnectionError as exc:
            raise GatewayError(f"brama: cannot reach {self.base_url}: {exc.__cause__ or exc}", permanent=False) from exc


def _status_error(exc: openai.APIStatusError) -> GatewayError:
    """Return the GatewayError for an HTTP error answer: 5xx, 408 and 429 are transient."""
    status = exc.status_code
    detail = _server_message(exc.body) or exc.message
    permanent = status < 500 and status not in TRANSIENT_CLIENT_STATUSES
    return GatewayError(f"brama: HTTP {status}: {detail}", permanent=permanent)


def _server_message(body: object) -> str:
    """Return the server's own error message from an error body, or an empty string."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
    if isinstance(body, str):
        return body[:500]
    return ""


#: The most tokens one completion may report in a count; more is no model's answer but a broken gateway
#: (no context window comes within a thousandth of it), refused before it is debited (issue 27).
MAX_TOKENS_PER_CALL = 10**9


def _token_count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _unsupported(f"usage {key} is not an integer")
    if value < 0:
        raise _unsupported(f"usage {key} is negative")
    if value > MAX_TOKENS_PER_CALL:
        raise _unsupported(f"usage {key} {value} is absurd: more than {MAX_TOKENS_PER_CALL:,} tokens in one completion")
    return value


def parse_usage(data: object) -> Usage:
    """Return the usage block as ``Usage``, refusing one that would make accounting drift."""
    if not isinstance(data, dict):
        raise _unsupported("no usage block")
    usage = Usage(
        prompt_tokens=_token_count(data, "prompt_tokens"),
        completion_tokens=_token_count(data, "completion_tokens"),
        total_tokens=_token_count(data, "total_tokens"),
    )
    # A total of 0 means the gateway did not count; only a real disagreement is refused.
    if usage.total_tokens != 0 and usage.total_tokens != usage.prompt_tokens + usage.completion_tokens:
        raise GatewayError("brama: usage total does not match prompt plus completion", permanent=True)
    return usage


def _parse_tool_call(data: object) -> ToolCall:
    if not isinstance(data, dict) or data.get("type") != "function":
        raise _unsupported("a tool call is not of type function")
    function = data.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise _unsupported("a tool call has no function name")
    if not isinstance(data.get("id"), str) or not data["id"]:
        raise _unsupported("a tool call has no id")
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        raise _unsupported("tool call arguments are not JSON text")
    return ToolCall(id=data["id"], name=function["name"], arguments=arguments)


def parse_completion(body: bytes, *, requested_model: str, elapsed_ns: int) -> Completion:
    """Return the ``Completion`` in a chat-completions response body, or raise a permanent ``GatewayError``."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _unsupported(f"body is not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise _unsupported("body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _unsupported("no choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise _unsupported("the first choice has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise _unsupported("message content is not text")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _unsupported("tool_calls is not a list")
    tool_calls = [_parse_tool_call(call) for call in raw_calls]
    if "usage" not in data or data["usage"] is None:
        raise _unsupported("no usage block")
    try:
        usage = parse_usage(data["usage"])
    except GatewayError as exc:
        raise GatewayError(str(exc), permanent=True, usage=data["usage"], elapsed_ns=elapsed_ns) from None
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise _unsupported("model is not text")
    wire: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        # The API refuses an empty tool_calls list, so the key is present only when there are calls.
        wire["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in tool_calls
        ]
    finish_reason = choice.get("finish_reason")
    return Completion(
        content=content,
        tool_calls=tool_calls,
        usage=usage,
        model=model or requested_model,
        elapsed_ns=elapsed_ns,
        message=wire,
        finish_reason=finish_reason if isinstance(finish_reason, str) else "",
    )


# --- Factory from settings --------------------------------------------------

_demo_lock = threading.Lock()
_demo_server: ChatCompletionsServer | None = None


def is_demo() -> bool:
    """Return True when no gateway is configured and the bundled demo model answers instead."""
    return not settings.BRAMA_BASE_URL


def demo_base_url() -> str:
    """Return the base URL of this process's demo model server, starting it on first use."""
    global _demo_server
    with _demo_lock:
        if _demo_server is None:
            from singularity.demo_model import ChatCompletionsServer, demo_policy

            server = ChatCompletionsServer(demo_policy)
            server.start()
            _demo_server = server
        return _demo_server.base_url


def _read_secret(path: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes().rstrip(b"\r\n")
    except OSError as exc:
        raise ConfigError(f"BRAMA_HMAC_SECRET_FILE: cannot read {path!r}: {exc.strerror}") from exc


def get_gateway() -> Gateway:
    """Return a Gateway configured from settings; the demo model server when BRAMA_BASE_URL is empty."""
    common: dict[str, Any] = {
        "agent_id": settings.BRAMA_AGENT_ID,
        "timeout": settings.BRAMA_TIMEOUT_SECS,
        "max_retries": settings.BRAMA_MAX_RETRIES,
    }
    if is_demo():
        return Gateway(demo_base_url(), "demo", **common)
    return Gateway(
        settings.BRAMA_BASE_URL,
        settings.BRAMA_API_KEY,
        hmac_secret=_read_secret(settings.BRAMA_HMAC_SECRET_FILE),
        **common,
    )
