"""JSON from outside (API bodies, Telegram updates) read within bounds, refused naming the place at fault.

Both databases must be able to hold what is accepted, and the answer must be
renderable again, so a string (a value or a key) may not hold a NUL (Postgres
text and jsonb refuse U+0000) or a lone surrogate (it is not text, and has no
UTF-8). Nesting is bounded at ``MAX_DEPTH`` levels: Python's JSON reader and
every walk over the data after it recurse once per level.

A place is named like ``input.rows[3].name`` (``[1].output`` inside a list body).
"""

from __future__ import annotations

import json
import re
from typing import Any

#: The deepest nesting of objects and lists accepted.
MAX_DEPTH = 64
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]')


class JsonRefused(ValueError):
    """JSON that is not accepted; ``where`` names the place ("" for the whole document)."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where or 'body'}: {why}")
        self.where = where
        self.why = why


def text_problem(text: str, *, nul: bool = False) -> str:
    """Why ``text`` cannot be stored or sent back ("" when it can): a NUL or a lone surrogate.

    With ``nul`` a NUL passes: the caller makes it storable (a run's evidence, ``singularity.nul``).
    """
    found = (_SURROGATE if nul else _BAD_CHAR).search(text)
    if found is None:
        return ""
    if found.group() == "\x00":
        return "contains a NUL character (U+0000), which no text here may hold"
    return f"contains a lone surrogate (U+{ord(found.group()):04X}), which is not text"


def loads(raw: bytes | str, *, nul: bool = False) -> Any:
    """Parse ``raw`` as JSON and check it (see ``check``); JsonRefused naming the place when it is refused.

    Broken JSON is refused too (its ``where`` is "", its ``why`` Python's words). With ``nul`` a NUL passes.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise JsonRefused("", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise JsonRefused(_too_deep_at(text), _too_deep()) from None
    except ValueError as exc:
        raise JsonRefused("", f"JSON parse error - {exc}") from None
    check(data, nul=nul)
    return data


def check(data: Any, *, nul: bool = False) -> None:
    """Raise JsonRefused at the first string holding a NUL (unless ``nul``) or a lone surrogate, or nesting past
    MAX_DEPTH."""
    _check(data, "", 0, nul)


def _check(value: Any, where: str, depth: int, nul: bool) -> None:
    if isinstance(value, str):
        if problem := text_problem(value, nul=nul):
            raise JsonRefused(where, problem)
        return
    if not isinstance(value, (dict, list)):
        return
    if depth >= MAX_DEPTH:
        raise JsonRefused(_shorten(where), _too_deep())
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and (problem := text_problem(key, nul=nul)):
                raise JsonRefused(where, f"a key {problem}")
            _check(item, _join(where, key), depth + 1, nul)
    else:
        for index, item in enumerate(value):
            _check(item, f"{where}[{index}]", depth + 1, nul)


def _name(key: Any) -> str:
    name = str(key)
    return name[:59] + "…" if len(name) > 60 else name


def _join(where: str, key: Any) -> str:
    return f"{where}.{_name(key)}" if where else _name(key)


#: A place past the depth bound is named by its first steps only.
_SHOWN_STEPS = 4
_STEP = re.compile(r"\[\d+\]|\.?[^.\[]+")


def _shorten(where: str) -> str:
    steps = _STEP.findall(where)
    return where if len(steps) <= _SHOWN_STEPS else "".join(steps[:_SHOWN_STEPS]) + "…"


def _too_deep() -> str:
    return f"nested more than {MAX_DEPTH} levels deep; the bound is {MAX_DEPTH}"


def _too_deep_at(text: str) -> str:
    """The place where ``text`` first nests past MAX_DEPTH, read from its tokens (it is too deep to parse)."""
    # Each open container: [is an object, its current key or index, expecting a key].
    stack: list[list[Any]] = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        top = stack[-1] if stack else None
        if token in "{[":
            if len(stack) >= MAX_DEPTH:
                return _shorten("".join(_step(c) for c in stack).lstrip("."))
            stack.append([token == "{", "" if token == "{" else 0, token == "{"])
        elif token in "]}":
            if stack:
                stack.pop()
        elif top is None:
            continue
        elif token == ":":
            top[2] = False
        elif token == ",":
            if top[0]:
                top[2] = True
            else:
                top[1] += 1
        elif top[0] and top[2]:
            try:
                top[1] = json.loads(token)
            except ValueError:
                top[1] = token.strip('"')
    return ""


def _step(container: list[Any]) -> str:
    is_object, key, _ = container
    return f".{_name(key)}" if is_object else f"[{key}]"


#: What a JSON value's Python type is called in a refusal ("expected an integer, got text").
KIND_NAMES = {dict: "an object", list: "a list", str: "text", int: "an integer", bool: "a boolean", float: "a number"}


def value_at(document: dict[str, Any], place: str) -> Any:
    """The value at a dotted ``place`` ("pull_request.number"), or None when it (or an object on the way) is absent
    or not an object."""
    value: Any = document
    for step in place.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    return value


def kind_name(value: Any) -> str:
    """What ``value`` is, in a refusal's words (``KIND_NAMES``; "null" for anything else)."""
    for kind in (bool, dict, list, str, int, float):
        if isinstance(value, kind):
            return KIND_NAMES[kind]
    return "null"
