"""Our own error classes, each carrying the exit code the being CLI uses.

Exit codes follow the origin CLI: 0 success, 2 configuration, 3 upstream
(gateway or MCP), 4 state, 5 tool or runtime.
"""

from __future__ import annotations


class SingularityError(Exception):
    exit_code = 5


class ConfigError(SingularityError):
    """Bad configuration or bad input: names the variable, file or field."""

    exit_code = 2


class UpstreamError(SingularityError):
    """The gateway or an MCP server failed. ``permanent`` decides whether the run aborts."""

    exit_code = 3

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


class StateError(SingularityError):
    """The being's record is missing, inconsistent, or would become so."""

    exit_code = 4


class ToolRuntimeError(SingularityError):
    exit_code = 5
