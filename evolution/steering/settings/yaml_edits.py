"""Round-trip edits of MANIFEST.yaml and entity frontmatter: change one key, keep every untouched line byte for byte."""

from __future__ import annotations

import copy
import difflib
import io
import re
from collections import Counter
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from evolution.steering.settings.base import REFUSED, REMOVE, Edit, SettingsRefusal
from singularity.brain import frontmatter


def _indents(text: str) -> tuple[int, int, int]:
    """(mapping indent, sequence indent, dash offset) as the text writes them (2, 2, 0 when it cannot tell)."""
    mapping = min(
        (len(m.group(1)) for m in re.finditer(r"^( +)[^\s#\-][^\n]*:", text, re.MULTILINE)),
        default=2,
    )
    # A text that writes no sequence gets the indented style: "key:" then "  - item".
    sequence, offset = mapping + 2, mapping
    try:
        _, guessed, dash = load_yaml_guess_indent(text)
    except YAMLError:
        guessed, dash = None, None
    if guessed is not None and dash is not None:
        sequence, offset = int(guessed), int(dash)
    return mapping, max(sequence, offset + 2), offset


def _yaml_for(text: str) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.allow_duplicate_keys = False
    mapping, sequence, offset = _indents(text)
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    yaml.Representer = _Representer
    return yaml


class _Representer(RoundTripRepresenter):
    """The round-trip representer writing null as ``null`` (not an empty value), so a set null reads as meant."""


def _dump(yaml: YAML, doc: Any) -> str:
    if doc is None or (isinstance(doc, dict) and not doc):
        return ""
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def _node(value: Any) -> Any:
    """A plain value as round-trip nodes (so a new block can carry the comments that follow it)."""
    if isinstance(value, dict):
        return CommentedMap((k, _node(v)) for k, v in value.items())
    if isinstance(value, list):
        return CommentedSeq(_node(v) for v in value)
    return value


def _deepest_last(node: Any) -> tuple[Any, Any]:
    """The (container, key) of the last line a block collection writes (its trailing comment hangs there)."""
    key = list(node.keys())[-1] if isinstance(node, dict) else len(node) - 1
    child = node[key]
    if isinstance(child, (CommentedMap, CommentedSeq)) and len(child) and not child.fa.flow_style():
        return _deepest_last(child)
    return node, key


def _slot(container: Any) -> int:
    return 0 if isinstance(container, CommentedSeq) else 2


def _take_tail(container: Any, key: Any) -> str:
    """Detach and return the lines that follow the line of ``container[key]`` (blank lines, comments)."""
    items = container.ca.items.get(key)
    slot = _slot(container)
    token = items[slot] if items and len(items) > slot else None
    if not isinstance(token, CommentToken):
        return ""
    value = token.value
    cut = value.find("\n")
    if cut < 0 or cut == len(value) - 1:
        return ""
    token.value = value[: cut + 1]
    return value[cut + 1 :]


def _put_tail(container: Any, key: Any, tail: str) -> None:
    """Hang ``tail`` (whole lines) after the line of ``container[key]``."""
    if not tail:
        return
    slot = _slot(container)
    items = container.ca.items.setdefault(key, [None, None, None, None])
    token = items[slot]
    if isinstance(token, CommentToken):
        token.value = (token.value if token.value.endswith("\n") else token.value + "\n") + tail
    else:
        items[slot] = CommentToken("\n" + tail, CommentMark(0), None)


def _append(node: CommentedMap, key: str, value: Any) -> None:
    """Add ``key`` after the map's last key, moving the comments and blank lines that followed it below the new key."""
    tail = ""
    if len(node) and not node.fa.flow_style():
        container, last = _deepest_last(node)
        tail = _take_tail(container, last)
    node[key] = value
    if tail:
        container, last = _deepest_last(node)
        _put_tail(container, last, tail)


def _set_in(doc: CommentedMap, parts: list[str], value: Any) -> None:
    node, index = doc, 0
    while index < len(parts) - 1 and isinstance(node.get(parts[index]), dict):
        node = node[parts[index]]
        index += 1
    built = _node(copy.deepcopy(value))
    for name in reversed(parts[index + 1 :]):
        built = CommentedMap([(name, built)])
    name = parts[index]
    if name in node:
        node[name] = built
    else:
        _append(node, name, built)


def _remove_in(doc: CommentedMap, parts: list[str]) -> None:
    """Drop the key and every mapping it leaves empty (so the tier below answers)."""
    chain: list[tuple[CommentedMap, str]] = []
    node: Any = doc
    for name in parts[:-1]:
        child = node.get(name)
        if not isinstance(child, dict):
            return
        chain.append((node, name))
        node = child
    if parts[-1] not in node:
        return
    del node[parts[-1]]
    while not node and chain:
        parent, name = chain.pop()
        del parent[name]
        node = parent


def _is_comment(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _graft(original: str, base: str, new: str) -> str:
    """Carry the change from ``base`` (the loader's dump of ``original``) to ``new`` onto ``original``'s own lines.

    Lines the edit did not touch keep their original bytes; comment and blank
    lines the dump dropped with a removed key stay where they were. When the
    dump does not keep ``original``'s line structure, ``new`` is the answer.
    """
    old_lines = original.splitlines(keepends=True)
    base_lines = base.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    if len(old_lines) != len(base_lines):
        return new
    out: list[str] = []
    matcher = difflib.SequenceMatcher(None, base_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(old_lines[i1:i2])
            continue
        added = new_lines[j1:j2]
        present = Counter(line.rstrip("\r\n") for line in added)
        lead: list[str] = []
        rest: list[str] = []
        seen_data = False
        for line in old_lines[i1:i2]:
            if not _is_comment(line):
                seen_data = True
                continue
            text = line.rstrip("\r\n")
            if present[text]:
                present[text] -= 1
                continue
            (rest if seen_data else lead).append(line)
        out.extend(lead + added + rest)
    return "".join(line if line.endswith("\n") or i == len(out) - 1 else line + "\n" for i, line in enumerate(out))


def edit_yaml(text: str, edits: list[Edit], *, path: str) -> str:
    """``text`` (a YAML mapping) with ``edits`` made, every untouched line byte for byte; SettingsRefusal when
    it does not parse or is not a mapping."""
    yaml = _yaml_for(text)
    try:
        doc = yaml.load(text) if text.strip() else None
        pristine = _yaml_for(text).load(text) if doc is not None else None
    except YAMLError as exc:
        raise SettingsRefusal(REFUSED, f"{path}: does not parse, so it cannot be edited: {exc}") from None
    prefix = ""
    if doc is None:
        doc = CommentedMap()
        prefix = text if not text or text.endswith("\n") else text + "\n"
    if not isinstance(doc, CommentedMap):
        raise SettingsRefusal(REFUSED, f"{path}: must be a mapping of keys to be edited")
    for edit in edits:
        parts = edit.key.split(".")
        if edit.op == REMOVE:
            _remove_in(doc, parts)
        else:
            _set_in(doc, parts, edit.value)
    new = _dump(yaml, doc)
    if pristine is None:
        return prefix + new if new else text
    return _graft(text, _dump(yaml, pristine), new)


def edit_markdown(text: str, edits: list[Edit], *, path: str) -> str:
    """A markdown entity file with ``edits`` made in its frontmatter; the body and the fences keep their bytes."""
    try:
        block, body, _ = frontmatter.split(text, path=path)
    except frontmatter.FrontmatterError as exc:
        raise SettingsRefusal(REFUSED, str(exc)) from None
    if block is None:
        new_block = edit_yaml("", edits, path=path)
        return f"{frontmatter.FENCE}\n{new_block}{frontmatter.FENCE}\n{text}" if new_block else text
    lines = text.splitlines(keepends=True)
    opening, closing = lines[0], lines[1 + len(block.splitlines(keepends=True))]
    return opening + edit_yaml(block, edits, path=path) + closing + body


def edit_file(path: str, text: str, edits: list[Edit]) -> str:
    """The file's new text: the manifest as YAML, an entity's markdown through its frontmatter."""
    if path.endswith(".md"):
        return edit_markdown(text, edits, path=path)
    return edit_yaml(text, edits, path=path)
