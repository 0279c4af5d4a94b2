"""YAML frontmatter of the brain's markdown files, and the brain's YAML files, as plain data.

A file may open with a block between two ``---`` lines; the rest is its body.
The block is read with ruamel.yaml's round-trip loader (the same one writers
use, so what we read is what a writer would keep) and converted to plain
dicts, lists and scalars for the database. A block that does not parse is an
error naming the file and the line; nothing is half-read.
"""

from __future__ import annotations

import datetime
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.scalarbool import ScalarBoolean

from singularity.errors import ConfigError

FENCE = "---"


class FrontmatterError(ConfigError):
    """A YAML block that does not parse, or is not a mapping; the message names the file and the line."""


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    return yaml


def to_plain(value: Any) -> Any:
    """Return ``value`` (ruamel round-trip nodes) as plain dicts, lists, str, int, float, bool and None."""
    if isinstance(value, dict):
        return {_key(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if value is None or isinstance(value, (bool, ScalarBoolean)):
        return value if value is None else bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if hasattr(value, "value"):  # TaggedScalar and friends: keep the text
        return to_plain(value.value)
    return str(value)


def _key(key: Any) -> str:
    """Mapping keys are text in JSON: a YAML ``1:`` or ``true:`` key becomes ``"1"`` / ``"true"``."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float) and key.is_integer():
        return str(int(key))
    if isinstance(key, int):
        return str(int(key))
    return str(key)


def parse_yaml(text: str, *, path: str, line_offset: int = 0) -> Any:
    """Parse ``text`` as YAML and return it as plain data; FrontmatterError naming ``path`` and the line."""
    try:
        data = _yaml().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = (mark.line + 1 + line_offset) if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        where = f"line {line}: " if line is not None else ""
        raise FrontmatterError(f"{path}: {where}broken YAML: {problem}") from None
    except YAMLError as exc:
        raise FrontmatterError(f"{path}: broken YAML: {exc}") from None
    return to_plain(data)


def split(text: str, *, path: str) -> tuple[str | None, str, int]:
    """Split a markdown file into (frontmatter YAML text or None, body, line number of the first YAML line)."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n").rstrip() != FENCE:
        return None, text, 0
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r\n").rstrip() == FENCE:
            return "".join(lines[1:index]), "".join(lines[index + 1 :]), 2
    raise FrontmatterError(f"{path}: line 1: the frontmatter opened with --- is never closed")


def parse(text: str, *, path: str) -> tuple[dict[str, Any], str]:
    """Return a markdown file's frontmatter as a plain dict (empty when it has none) and its body."""
    block, body, first_line = split(text, path=path)
    if block is None:
        return {}, body
    data = parse_yaml(block, path=path, line_offset=first_line - 1)
    if data is None:
        return {}, body
    if not isinstance(data, dict):
        raise FrontmatterError(f"{path}: line {first_line}: the frontmatter must be a mapping of keys")
    return data, body
