"""The echo tools served over streamable HTTP on 127.0.0.1 at the port given as the first argument."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from echo_server import build  # noqa: E402
from mcp.server.fastmcp import FastMCP  # noqa: E402

if __name__ == "__main__":
    port = int(sys.argv[1])
    build(FastMCP("echo-http", host="127.0.0.1", port=port, log_level="WARNING")).run("streamable-http")
