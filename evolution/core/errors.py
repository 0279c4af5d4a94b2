"""The loop's own errors that more than one layer raises or reads."""

from __future__ import annotations


class RuleError(Exception):
    """A window() or should_open() answered in a shape the engine cannot read; the message names the function."""
