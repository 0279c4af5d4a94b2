"""Checks behind ``being doctor``: each a pass, warn or fail line with what to fix."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from singularity.errors import SingularityError


@dataclass(frozen=True)
class Check:
    name: str
    level: str  # "pass" | "warn" | "fail"
    message: str
    exit_code: int = 0


def run_checks() -> Iterator[Check]:
    """Yield one result per check, in the order a person would fix things."""
    yield Check("settings", "pass", f"model {settings.BRAMA_MODEL}, max rounds {settings.SINGULARITY_MAX_TOOL_ROUNDS}")
    try:
        connection.ensure_connection()
        yield Check("database", "pass", f"{connection.vendor} reachable")
    except Exception as exc:  # noqa: BLE001 - any driver error means the same thing here
        yield Check("database", "fail", f"cannot connect: {exc}", exit_code=4)
    workspace = settings.SINGULARITY_WORKSPACE
    try:
        workspace.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=workspace):
            pass
        yield Check("workspace", "pass", f"{workspace} is writable")
    except OSError as exc:
        yield Check("workspace", "fail", f"SINGULARITY_WORKSPACE {workspace}: {exc.strerror}", exit_code=4)
    try:
        from singularity.tools import build_catalogue

        with build_catalogue() as catalogue:
            specs = catalogue.specs()
        mcp = sum(1 for s in specs if s.source.startswith("mcp:"))
        yield Check("tools", "pass", f"{len(specs)} tools ({mcp} from MCP servers)")
    except SingularityError as exc:
        yield Check("tools", "fail", str(exc), exit_code=exc.exit_code)
    from singularity.gateway import get_gateway, is_demo

    if is_demo():
        yield Check("gateway", "warn", "BRAMA_BASE_URL is not set: the deterministic demo model answers")
    else:
        try:
            get_gateway().ping()
            yield Check("gateway", "pass", f"{settings.BRAMA_BASE_URL} answers")
        except SingularityError as exc:
            yield Check("gateway", "fail", str(exc), exit_code=exc.exit_code)
