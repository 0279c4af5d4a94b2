"""YAML frontmatter of the brain's markdown files, and the brain's YAML files, as plain data.

A file may open with a block between two ``---`` lines; the rest is its body.
The block is read with ruamel.yaml's round-trip loader (the same one writers
use, so what we read is what a writer would keep) and converted to plain
dicts, lists and scalars for the database. A block that does not parse is an
error naming the file and the line; nothing is half-read.

The brain is written by people and by the loop, so a YAML text is read within
bounds, each refused with an error naming the file and the bound: at most
``MAX_FILE_BYTES`` bytes, at most ``MAX_DEPTH`` levels of nesting, at most
``MAX_ALIASES`` alias references (``*name``), and at most ``MAX_VALUES``
values once the aliases are expanded (a "billion laughs" of a few hundred
bytes would otherwise expand to 9**9 strings).
"""

from __future__ import annotations

import datetime
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer, MaxDepthExceededError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.scalarbool import ScalarBoolean

from singularity.errors import ConfigError

FENCE = "---"
#: The most bytes a brain file (an entity, a method, the manifest) may have.
MAX_FILE_BYTES = 256 * 1024
#: The deepest nesting of mappings and lists in one YAML text.
MAX_DEPTH = 32
#: The most alias references (``*name``) in one YAML text.
MAX_ALIASES = 50
#: The most values (mapping entries, list items, scalars) one YAML text reads as, aliases expanded.
MAX_VALUES = 20_000


class FrontmatterError(ConfigError):
    """A YAML block that does not parse, or is not a mapping; the message names the file and the line."""


class _OverBound(Exception):
    """A YAML text past one of the bounds; ``line`` is 1-based within the text, when known."""

    def __init__(self, why: str, line: int | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.line = line


class _BoundedComposer(Composer):
    """The composer, counting alias references: past ``MAX_ALIASES`` the text is refused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.parser.check_event(AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise _OverBound(
                    f"more than {MAX_ALIASES} aliases (*name) in one file; the bound is {MAX_ALIASES}",
                    self.parser.peek_event().start_mark.line + 1,
                )
        return super().compose_node(parent, index)


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yaml.max_depth = MAX_DEPTH
    yaml.Composer = _BoundedComposer
    return yaml


def to_plain(value: Any) -> Any:
    """Return ``value`` (ruamel round-trip nodes) as plain dicts, lists, str, int, float, bool and None.

    Raises ``_OverBound`` past ``MAX_DEPTH`` levels or ``MAX_VALUES`` values
    (an alias is expanded into a copy each time it is referenced).
    """
    return _plain(value, 0, [0])


def _plain(value: Any, depth: int, count: list[int]) -> Any:
    count[0] += 1
    if count[0] > MAX_VALUES:
        raise _OverBound(f"its aliases expand to more than {MAX_VALUES} values; the bound is {MAX_VALUES}")
    if isinstance(value, (dict, list, tuple)) and depth >= MAX_DEPTH:
        raise _OverBound(f"nested more than {MAX_DEPTH} levels deep; the bound is {MAX_DEPTH}")
    if isinstance(value, dict):
        return {_key(k): _plain(v, depth + 1, count) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1, count) for v in value]
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
        return _plain(value.value, depth, count)
    return str(value)


def _key(key: Any) -> str:
    """Mapping keys are text in JSON: a YAML ``1:`` or ``true:`` key becomes ``"1"`` / ``"true"``.

    A mapping or a list as a key is refused (its text could be an expanded alias bomb).
    """
    if isinstance(key, (dict, list, tuple)):
        raise _OverBound("a mapping key must be text, a number or a boolean, not a mapping or a list")
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float) and key.is_integer():
        return str(int(key))
    if isinstance(key, int):
        return str(int(key))
    return str(key)


def parse_yaml(text: str, *, path: str, line_offset: int = 0) -> Any:
    """Parse ``text`` as YAML and return it as plain data; FrontmatterError naming ``path`` and the line.

    A text past a bound (see the module's docstring) is refused the same way, naming the bound.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_FILE_BYTES:
        raise FrontmatterError(f"{path}: {size} bytes is over the {MAX_FILE_BYTES}-byte bound on a brain file")
    try:
        return to_plain(_yaml().load(text))
    except _OverBound as exc:
        where = f"line {exc.line + line_offset}: " if exc.line is not None else ""
        raise FrontmatterError(f"{path}: {where}YAML refused: {exc.why}") from None
    except (MaxDepthExceededError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1 + line_offset}: " if mark is not None else ""
        why = f"nested more than {MAX_DEPTH} levels deep; the bound is {MAX_DEPTH}"
        raise FrontmatterError(f"{path}: {where}YAML refused: {why}") from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = (mark.line + 1 + line_offset) if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        where = f"line {line}: " if line is not None else ""
        raise FrontmatterError(f"{path}: {where}broken YAML: {problem}") from None
    except YAMLError as exc:
        raise FrontmatterError(f"{path}: broken YAML: {exc}") from None


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
