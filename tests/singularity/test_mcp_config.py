"""The MCP config file: what it accepts, and that every refusal names the file and the key."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from singularity.errors import ConfigError
from singularity.tools.mcp_config import load_mcp_config


def _write(tmp_path: Path, document: Any) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document), encoding="utf-8")
    return str(path)


def _refusal(tmp_path: Path, document: Any) -> str:
    path = _write(tmp_path, document)
    with pytest.raises(ConfigError) as caught:
        load_mcp_config(path)
    message = str(caught.value)
    assert message.startswith(f"mcp config {path}: "), message
    return message


def test_it_reads_stdio_and_http_servers_in_file_order(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "mcpServers": {
                "finance": {"command": sys.executable, "args": ["-m", "x"], "env": {"A": "1"}, "cwd": str(tmp_path)},
                "web": {"url": "https://example.org/mcp", "headers": {"X-Team": "a"}, "type": "streamable-http"},
                "web2": {"url": "http://127.0.0.1:9/mcp", "transport": "streamableHttp"},
                "off": {"command": "nothing", "disabled": True},
            }
        },
    )
    servers = load_mcp_config(path)
    assert [s.name for s in servers] == ["finance", "web", "web2"]
    finance, web, _ = servers
    assert (finance.transport, finance.command, finance.args, finance.env, finance.cwd) == (
        "stdio",
        sys.executable,
        ("-m", "x"),
        {"A": "1"},
        str(tmp_path),
    )
    assert (web.transport, web.url, web.headers) == ("http", "https://example.org/mcp", {"X-Team": "a"})


def test_an_empty_server_list_is_accepted(tmp_path: Path) -> None:
    assert load_mcp_config(_write(tmp_path, {"mcpServers": {}})) == []


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"command": 3}, "mcpServers.finance.command: expected a non-empty string"),
        ({"command": ""}, "mcpServers.finance.command: expected a non-empty string"),
        ({"command": "x", "args": "a b"}, "mcpServers.finance.args: expected a list of strings"),
        ({"command": "x", "args": ["a", 1]}, "mcpServers.finance.args: expected a list of strings"),
        ({"command": "x", "env": {"A": 1}}, "mcpServers.finance.env: expected an object of strings"),
        ({"command": "x", "env": ["A=1"]}, "mcpServers.finance.env: expected an object of strings"),
        ({"command": "x", "cwd": "/no/such/dir"}, "mcpServers.finance.cwd: no such directory"),
        ({"command": "x", "arg": []}, "mcpServers.finance.arg: unknown key"),
        ({"command": "x", "disabled": "yes"}, "mcpServers.finance.disabled: expected true or false"),
        ({"command": "x", "type": "sse"}, "mcpServers.finance.type: unsupported transport"),
        ({"command": "x", "type": "http"}, "mcpServers.finance.type: stdio server declared as http"),
        ({"url": "ftp://example.org"}, "mcpServers.finance.url: expected an http or https URL"),
        ({"url": "https://"}, "mcpServers.finance.url: expected an http or https URL"),
        (
            {"url": "https://example.org", "headers": {"A": 2}},
            "mcpServers.finance.headers: expected an object of strings",
        ),
        ({"url": "https://example.org", "env": {}}, "mcpServers.finance.env: unknown key for a http server"),
        ({"url": "https://example.org", "command": "x"}, "mcpServers.finance.url: give either command"),
        ({}, "mcpServers.finance.command: required"),
        ({"type": "http"}, "mcpServers.finance.url: required"),
        ([], "mcpServers.finance: expected an object"),
    ],
)
def test_each_bad_entry_is_refused_naming_the_key(tmp_path: Path, entry: Any, key: str) -> None:
    assert key in _refusal(tmp_path, {"mcpServers": {"finance": entry}})


@pytest.mark.parametrize("name", ["Finance", "a__b", "-x", "with space", "fin.ance", ""])
def test_a_bad_server_name_is_refused(tmp_path: Path, name: str) -> None:
    assert f"mcpServers.{name}: invalid server name" in _refusal(tmp_path, {"mcpServers": {name: {"command": "x"}}})


def test_self_is_reserved_for_the_builtins(tmp_path: Path) -> None:
    assert "mcpServers.self: the name 'self' is reserved" in _refusal(
        tmp_path, {"mcpServers": {"self": {"command": "x"}}}
    )


def test_a_server_named_twice_is_refused(tmp_path: Path) -> None:
    text = '{"mcpServers": {"finance": {"command": "a"}, "finance": {"command": "b"}}}'
    assert "finance: duplicate key" in _refusal(tmp_path, text)


def test_invalid_json_is_refused_with_its_line(tmp_path: Path) -> None:
    assert "line 2 column" in _refusal(tmp_path, '{\n  "mcpServers": {,}\n}')


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ([], "expected a JSON object"),
        ({}, "mcpServers: required"),
        ({"mcpServers": []}, "mcpServers: expected an object"),
    ],
)
def test_a_bad_document_is_refused(tmp_path: Path, document: Any, expected: str) -> None:
    assert expected in _refusal(tmp_path, document)


def test_an_unreadable_file_is_refused_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(ConfigError, match=f"mcp config {missing}: cannot read"):
        load_mcp_config(missing)
