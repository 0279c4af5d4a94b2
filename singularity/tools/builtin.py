"""The being's self tools (``self__*``): its memory, prompt, rules, learnings, model, workspace and children.

Tools change the being's mind fields in memory only; the caller saves the
being after every tool. The one exception is ``self__spawn_child``, which
creates (and so saves) a new being and the parent's transfer to it
(``singularity.being.children``). A tool signals a refusal by raising
``ToolFailure``; the catalogue turns it into a ``failed`` outcome.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from django.conf import settings

from singularity.errors import SingularityError
from singularity.money import money_str

MAX_MEMORIES = 200
MAX_MEMORY_KEY_CHARS = 100
MAX_MEMORY_VALUE_BYTES = 4 * 1024
MAX_TEXT_BYTES = 8 * 1024  # a prompt, a rule, a learning
MAX_RULES = 500
MAX_LEARNINGS = 500
MAX_MODEL_CHARS = 200
MAX_FILE_BYTES = 1024 * 1024
MAX_LISTED_FILES = 500


class ToolFailure(Exception):
    """A refusal by a built-in tool; the message is what the model is told."""


@dataclass(frozen=True)
class Builtin:
    """One built-in tool: its JSON schema and the function ``(being, arguments) -> JSON-able result``."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[Any, dict[str, Any]], Any]


def _schema(properties: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def validate_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> str:
    """Return "" when ``arguments`` fit a built-in's flat schema, else ``"<field>: <problem>"``."""
    properties = schema["properties"]
    for name in schema["required"]:
        if name not in arguments:
            return f"{name}: required"
    for name, value in arguments.items():
        if name not in properties:
            return f"{name}: unexpected argument"
        if properties[name]["type"] == "string" and not isinstance(value, str):
            return f"{name}: expected a string, got {_json_type(value)}"
    return ""


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string" if isinstance(value, str) else type(value).__name__


def _bounded_text(value: str, what: str, limit: int = MAX_TEXT_BYTES) -> str:
    """Return ``value`` when it is non-blank and at most ``limit`` UTF-8 bytes; else raise ``ToolFailure``."""
    if not value.strip():
        raise ToolFailure(f"{what} must not be empty")
    size = len(value.encode())
    if size > limit:
        raise ToolFailure(f"{what} is {size} bytes; the limit is {limit}")
    return value


# --- memory -----------------------------------------------------------------


def remember(being: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Store ``value`` under ``key`` (replacing it); return the key and how many memories there are."""
    key, value = args["key"], args["value"]
    if not key.strip():
        raise ToolFailure("key must not be empty")
    if len(key) > MAX_MEMORY_KEY_CHARS:
        raise ToolFailure(f"key is {len(key)} characters; the limit is {MAX_MEMORY_KEY_CHARS}")
    if len(value.encode()) > MAX_MEMORY_VALUE_BYTES:
        raise ToolFailure(f"value is {len(value.encode())} bytes; the limit is {MAX_MEMORY_VALUE_BYTES}")
    memories = dict(being.memories or {})
    if key not in memories and len(memories) >= MAX_MEMORIES:
        raise ToolFailure(f"memory is full ({MAX_MEMORIES} keys); forget one first")
    memories[key] = value
    being.memories = memories
    return {"remembered": key, "memories": len(memories)}


def recall(being: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Return the value stored under ``key``; a missing key is a failure."""
    memories = being.memories or {}
    if args["key"] not in memories:
        raise ToolFailure(f"no memory named {args['key'][:MAX_MEMORY_KEY_CHARS]!r}")
    return {"key": args["key"], "value": memories[args["key"]]}


def forget(being: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Delete the memory under ``key``; a missing key is a failure."""
    memories = dict(being.memories or {})
    if args["key"] not in memories:
        raise ToolFailure(f"no memory named {args['key'][:MAX_MEMORY_KEY_CHARS]!r}")
    del memories[args["key"]]
    being.memories = memories
    return {"forgotten": args["key"], "memories": len(memories)}


# --- the mind ---------------------------------------------------------------


def set_prompt(being: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Replace the system prompt; return its new size."""
    being.system_prompt = _bounded_text(args["prompt"], "prompt")
    return {"prompt_bytes": len(being.system_prompt.encode())}


def _append(being: Any, field_name: str, text: str, what: str, limit: int) -> dict[str, Any]:
    entries = list(getattr(being, field_name) or [])
    if len(entries) >= limit:
        raise ToolFailure(f"there are already {limit} {field_name}; they are append-only")
    entries.append(_bounded_text(text, what))
    setattr(being, field_name, entries)
    return {field_name: len(entries)}


def add_rule(being: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Append a rule; return how many rules there are."""
    return _append(being, "rules", args["rule"], "rule", MAX_RULES)


def add_learning(being: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Append a learning; return how many learnings there are."""
    return _append(being, "learnings", args["learning"], "learning", MAX_LEARNINGS)


def switch_model(being: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Change the model used from the next round on; return the new and the previous model."""
    model = args["model"].strip()
    if not model:
        raise ToolFailure("model must not be empty")
    if len(model) > MAX_MODEL_CHARS:
        raise ToolFailure(f"model is {len(model)} characters; the limit is {MAX_MODEL_CHARS}")
    previous, being.model = being.model, model
    return {"model": model, "previous": previous}


# --- the workspace ----------------------------------------------------------


def workspace_root(being: Any) -> Path:
    """Return the being's workspace directory, ``SINGULARITY_WORKSPACE / <name>``, creating it."""
    root = Path(settings.SINGULARITY_WORKSPACE) / being.name
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


def _confined(being: Any, path: str, *, allow_root: bool = False) -> tuple[Path, str]:
    """Return the resolved absolute path of ``path`` inside the workspace and its relative form.

    Refuses absolute paths, ``..``, NUL and anything (symlinks included)
    resolving outside the workspace. Messages never show absolute paths.
    """
    if "\x00" in path:
        raise ToolFailure("path must not contain NUL")
    if PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute() or PureWindowsPath(path).drive:
        raise ToolFailure("path must be relative to the workspace")
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if ".." in parts:
        raise ToolFailure("path must not contain '..'")
    relative = "/".join(part for part in parts if part not in (".", ""))
    if not relative and not allow_root:
        raise ToolFailure("path must name a file")
    root = workspace_root(being)
    resolved = (root / relative).resolve()
    if resolved != root and not resolved.is_relative_to(root):
        raise ToolFailure(f"{relative}: leads outside the workspace")
    return resolved, relative or "."


def list_files(being: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Return the entries of a workspace directory: name, type (file/dir/other) and size, sorted by name."""
    directory, relative = _confined(being, args.get("path", ""), allow_root=True)
    if not directory.is_dir():
        raise ToolFailure(f"{relative}: not a directory")
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise ToolFailure(f"{relative}: cannot list: {exc.strerror}") from exc
    entries = []
    for name in names[:MAX_LISTED_FILES]:
        info = (directory / name).lstat()
        kind = "dir" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode) else "other"
        entries.append({"name": name, "type": kind, "size": info.st_size if kind == "file" else None})
    return {"path": relative, "entries": entries, "truncated": len(names) > MAX_LISTED_FILES}


def read_file(being: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Return the UTF-8 text of a workspace file of at most 1 MiB."""
    target, relative = _confined(being, args["path"])
    if not target.is_file():
        raise ToolFailure(f"{relative}: no such file")
    size = target.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ToolFailure(f"{relative}: {size} bytes; the limit is {MAX_FILE_BYTES}")
    try:
        content = target.read_bytes().decode()
    except UnicodeDecodeError as exc:
        raise ToolFailure(f"{relative}: not UTF-8 text") from exc
    except OSError as exc:
        raise ToolFailure(f"{relative}: cannot read: {exc.strerror}") from exc
    return {"path": relative, "content": content}


def write_file(being: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Write ``content`` to a workspace file atomically (temp file, then rename); return its size."""
    target, relative = _confined(being, args["path"])
    data = args["content"].encode()
    if len(data) > MAX_FILE_BYTES:
        raise ToolFailure(f"content is {len(data)} bytes; the limit is {MAX_FILE_BYTES}")
    if target.is_dir():
        raise ToolFailure(f"{relative}: is a directory")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=".write-", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, target)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as exc:
        raise ToolFailure(f"{relative}: cannot write: {exc.strerror}") from exc
    return {"path": relative, "bytes": len(data)}


# --- children ---------------------------------------------------------------


def spawn_child(being: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Create a child being with its own prompt, funded from the parent's balance (or as configured).

    Returns the child's name, its starting balance and the parent's balance after.
    """
    from singularity.being import children
    from singularity.being.lease import LeaseLost

    prompt = _bounded_text(args["prompt"], "prompt")
    try:
        child = children.spawn_child(being, name=args["name"], prompt=prompt, balance_usd=args.get("balance_usd"))
    except LeaseLost:
        raise
    except SingularityError as exc:
        raise ToolFailure(str(exc)) from exc
    return {"child": child.name, "starting_usd": money_str(child.starting), "remaining_usd": money_str(being.remaining)}


BUILTINS: tuple[Builtin, ...] = (
    Builtin(
        "self__remember",
        "Store a memory under a key (replaces an existing one). At most 200 memories; key up to 100 characters, value up to 4 KiB.",
        _schema({"key": _string("Memory key"), "value": _string("Text to remember")}, ["key", "value"]),
        remember,
    ),
    Builtin(
        "self__recall", "Read the memory stored under a key.", _schema({"key": _string("Memory key")}, ["key"]), recall
    ),
    Builtin(
        "self__forget",
        "Delete the memory stored under a key.",
        _schema({"key": _string("Memory key")}, ["key"]),
        forget,
    ),
    Builtin(
        "self__set_prompt",
        "Replace your system prompt (up to 8 KiB). It takes effect from the next round.",
        _schema({"prompt": _string("The new system prompt")}, ["prompt"]),
        set_prompt,
    ),
    Builtin(
        "self__add_rule",
        "Append a rule to your permanent rules (append-only, up to 500, each up to 8 KiB).",
        _schema({"rule": _string("The rule")}, ["rule"]),
        add_rule,
    ),
    Builtin(
        "self__add_learning",
        "Append a learning to your permanent learnings (append-only, up to 500, each up to 8 KiB).",
        _schema({"learning": _string("What you learned")}, ["learning"]),
        add_learning,
    ),
    Builtin(
        "self__switch_model",
        "Think with another model from the next round on.",
        _schema({"model": _string("Model name")}, ["model"]),
        switch_model,
    ),
    Builtin(
        "self__list_files",
        "List a directory of your workspace (default: its root).",
        _schema({"path": _string("Directory relative to the workspace")}, []),
        list_files,
    ),
    Builtin(
        "self__read_file",
        "Read a UTF-8 text file (up to 1 MiB) from your workspace.",
        _schema({"path": _string("File path relative to the workspace")}, ["path"]),
        read_file,
    ),
    Builtin(
        "self__write_file",
        "Write a UTF-8 text file (up to 1 MiB) in your workspace, replacing it atomically.",
        _schema(
            {"path": _string("File path relative to the workspace"), "content": _string("File content")},
            ["path", "content"],
        ),
        write_file,
    ),
    Builtin(
        "self__spawn_child",
        "Create a child being with its own system prompt. It is funded by moving balance_usd (a decimal "
        "string) from your remaining balance to it; refused when you cannot pay or already have the most "
        "live children allowed.",
        _schema(
            {
                "name": _string("The child's unique name"),
                "prompt": _string("The child's system prompt"),
                "balance_usd": _string('What you give the child from your balance, e.g. "2.50"'),
            },
            ["name", "prompt"],
        ),
        spawn_child,
    ),
)
