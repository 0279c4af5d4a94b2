"""Fixtures that run the fake MCP servers as real processes (stdio children, and one over streamable HTTP)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parent / "mcp"
FINANCE_SERVER = SCRIPTS / "finance_server.py"
ECHO_SERVER = SCRIPTS / "echo_server.py"
HTTP_SERVER = SCRIPTS / "http_server.py"


def stdio_entry(script: Path, *args: str, **extra: Any) -> dict[str, Any]:
    """Return an ``mcpServers`` entry running ``script`` with this interpreter."""
    return {"command": sys.executable, "args": [str(script), *args], **extra}


@pytest.fixture
def write_mcp_config(tmp_path: Path) -> Callable[[dict[str, Any]], str]:
    """Return a function writing ``{"mcpServers": servers}`` to a temporary file and returning its path."""
    counter = iter(range(1_000_000))

    def write(servers: dict[str, Any]) -> str:
        path = tmp_path / f"mcp-{next(counter)}.json"
        path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
        return str(path)

    return write


@pytest.fixture
def mcp_config(write_mcp_config: Callable[[dict[str, Any]], str]) -> str:
    """Return the path of a config running the fake ``finance`` and ``echo`` servers over stdio."""
    return write_mcp_config({"finance": stdio_entry(FINANCE_SERVER), "echo": stdio_entry(ECHO_SERVER)})


@dataclass
class HttpServer:
    url: str
    process: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the fake HTTP MCP server exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the fake HTTP MCP server did not listen on port {port} within {timeout:g}s")


@pytest.fixture
def mcp_http_server() -> Iterator[HttpServer]:
    """Run the echo tools over streamable HTTP on a free loopback port; yield its URL and process."""
    port = _free_port()
    process = subprocess.Popen([sys.executable, str(HTTP_SERVER), str(port)])
    try:
        _wait_for_port(port, process)
        yield HttpServer(url=f"http://127.0.0.1:{port}/mcp", process=process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
