"""MCP servers shipped for the demo: real processes speaking MCP over stdio, built with the ``mcp`` SDK.

``make run`` points the demo's being at them (``write_demo_mcp_config``) when no
gateway and no ``SINGULARITY_MCP_CONFIG`` are configured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FINANCE_SERVER = Path(__file__).resolve().parent / "finance.py"


def demo_mcp_servers(env: dict[str, str] | None = None) -> dict[str, dict[str, object]]:
    """Return the ``mcpServers`` entries of the demo: ``finance``, run with this interpreter."""
    entry: dict[str, object] = {"command": sys.executable, "args": [str(FINANCE_SERVER)]}
    if env:
        entry["env"] = dict(env)
    return {"finance": entry}


def write_demo_mcp_config(directory: Path) -> Path:
    """Write the demo's ``{"mcpServers": ...}`` file in ``directory`` and return its path (rewritten every time)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "demo-mcp.json"
    path.write_text(json.dumps({"mcpServers": demo_mcp_servers()}, indent=2) + "\n", encoding="utf-8")
    return path


def wire_demo_mcp(env: dict[str, str], var_dir: Path) -> bool:
    """Point ``env`` (a child process's environment) at the demo's MCP servers unless it names a config already.

    Returns whether it did. ``make run`` calls it for the demo, so the demo
    being has the shop's ``finance__check_sales`` to earn with.
    """
    if env.get("SINGULARITY_MCP_CONFIG"):
        return False
    env["SINGULARITY_MCP_CONFIG"] = str(write_demo_mcp_config(var_dir))
    return True
