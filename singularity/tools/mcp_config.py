"""Read the standard ``{"mcpServers": {...}}`` JSON that configures the being's MCP servers.

Every refusal is a ``ConfigError`` naming the file and the key, e.g.
``mcp config /x.json: mcpServers.finance.args: expected a list of strings``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from singularity.errors import ConfigError

#: A server name becomes the prefix of its tools' names (``<server>__<tool>``).
SERVER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
#: Reserved for the being's built-in tools (``self__*``).
RESERVED_NAMES = frozenset({"self"})
HTTP_TRANSPORTS = frozenset({"http", "streamable-http", "streamableHttp"})
STDIO_KEYS = frozenset({"command", "args", "env", "cwd", "type", "transport", "disabled"})
HTTP_KEYS = frozenset({"url", "headers", "type", "transport", "disabled"})


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server: ``transport`` is ``"stdio"`` (command, args, env, cwd) or ``"http"`` (url, headers)."""

    name: str
    transport: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def load_mcp_config(path: str | Path) -> list[ServerConfig]:
    """Return the enabled servers of the config file at ``path``, in file order.

    Raises ``ConfigError`` naming the file (and the line, or the key) when the
    file cannot be read, is not JSON, or any entry is refused.
    """
    where = f"mcp config {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text: {exc.reason}") from exc
    try:
        document = json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}") from exc
    except _DuplicateKey as exc:
        raise ConfigError(f"{where}: {exc.key}: duplicate key") from exc
    return parse_mcp_config(document, where=where)


def parse_mcp_config(document: Any, *, where: str) -> list[ServerConfig]:
    """Return the enabled servers of an already-parsed config document; ``where`` prefixes every refusal."""
    if not isinstance(document, dict):
        raise ConfigError(f"{where}: expected a JSON object with mcpServers")
    if "mcpServers" not in document:
        raise ConfigError(f"{where}: mcpServers: required")
    servers = document["mcpServers"]
    if not isinstance(servers, dict):
        raise ConfigError(f"{where}: mcpServers: expected an object")
    result = []
    for name, entry in servers.items():
        server = _parse_server(name, entry, where=f"{where}: mcpServers.{name}")
        if server is not None:
            result.append(server)
    return result


def _parse_server(name: str, entry: Any, *, where: str) -> ServerConfig | None:
    if not SERVER_NAME.match(name) or "__" in name:
        raise ConfigError(
            f"{where}: invalid server name (lowercase letters, digits, '_' and '-', starting with a letter or digit, no '__')"
        )
    if name in RESERVED_NAMES:
        raise ConfigError(f"{where}: the name {name!r} is reserved for the being's built-in tools")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise ConfigError(f"{where}.disabled: expected true or false")
    transport = _transport(entry, where=where)
    allowed = STDIO_KEYS if transport == "stdio" else HTTP_KEYS
    for key in entry:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown key for a {transport} server")
    if disabled:
        return None
    if transport == "stdio":
        return ServerConfig(
            name=name,
            transport="stdio",
            command=_nonempty_str(entry["command"], where=f"{where}.command"),
            args=tuple(_str_list(entry.get("args", []), where=f"{where}.args")),
            env=_str_dict(entry.get("env", {}), where=f"{where}.env"),
            cwd=_cwd(entry.get("cwd"), where=f"{where}.cwd"),
        )
    return ServerConfig(
        name=name,
        transport="http",
        url=_url(entry["url"], where=f"{where}.url"),
        headers=_str_dict(entry.get("headers", {}), where=f"{where}.headers"),
    )


def _transport(entry: dict[str, Any], *, where: str) -> str:
    """Return ``"stdio"`` or ``"http"`` from the entry's keys and its optional type/transport."""
    declared = None
    for key in ("type", "transport"):
        if key in entry:
            value = entry[key]
            if value != "stdio" and value not in HTTP_TRANSPORTS:
                raise ConfigError(
                    f"{where}.{key}: unsupported transport {value!r} (stdio, http, streamable-http or streamableHttp)"
                )
            kind = "stdio" if value == "stdio" else "http"
            if declared is not None and kind != declared:
                raise ConfigError(f"{where}.{key}: contradicts the other transport key")
            declared = kind
    has_command, has_url = "command" in entry, "url" in entry
    if has_command and has_url:
        raise ConfigError(f"{where}.url: give either command (stdio) or url (http), not both")
    if not has_command and not has_url:
        if declared == "http":
            raise ConfigError(f"{where}.url: required for an http server")
        raise ConfigError(f"{where}.command: required (or url for an http server)")
    kind = "stdio" if has_command else "http"
    if declared is not None and declared != kind:
        raise ConfigError(f"{where}.{'type' if 'type' in entry else 'transport'}: {kind} server declared as {declared}")
    return kind


def _nonempty_str(value: Any, *, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: expected a non-empty string")
    return value


def _str_list(value: Any, *, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return list(value)


def _str_dict(value: Any, *, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}: expected an object of strings")
    return dict(value)


def _cwd(value: Any, *, where: str) -> str | None:
    if value is None:
        return None
    directory = _nonempty_str(value, where=where)
    if not Path(directory).is_dir():
        raise ConfigError(f"{where}: no such directory {directory!r}")
    return directory


def _url(value: Any, *, where: str) -> str:
    url = _nonempty_str(value, where=where)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{where}: expected an http or https URL")
    return url
