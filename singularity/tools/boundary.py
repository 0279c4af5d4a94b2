"""The output boundary every tool result crosses before the model sees it.

A result is refused whole, never trimmed, and replaced by
``{"error": "output_rejected", "reason": ...}`` when:

- it is not JSON-serializable, or its JSON (UTF-8, compact) exceeds
  ``MAX_BYTES`` = 32 KiB;
- it nests deeper than ``MAX_DEPTH`` = 20 containers (a scalar is depth 0,
  ``{"a": 1}`` depth 1);
- any key looks secret: split into words (``_``, ``-``, ``.``, space and
  camelCase boundaries, case-insensitive), a key is secret when a word is
  one of ``SECRET_WORDS`` (``token`` but not ``tokens``, so ``total_tokens``
  passes) or two adjacent words are ``api key``, ``access token`` or
  ``private key``;
- any string (key or value) holds a PEM private key header
  (``-----BEGIN ... PRIVATE KEY-----``);
- any string (key or value) holds a local absolute path: ``/home/``,
  ``/root/``, ``/Users/``, ``/etc/``, ``/var/``, ``/tmp/``, ``/proc/`` not
  preceded by a letter, digit, ``.``, ``-`` or ``~`` (so the path part of
  ``https://host/tmp/x`` passes, ``file:///etc/x`` does not), or a Windows
  drive path such as ``C:\\`` or ``C:/``.

The reason names the rule and where in the result it tripped, never the
offending value.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_BYTES = 32 * 1024
MAX_DEPTH = 20
SECRET_WORDS = frozenset(
    {
        "apikey",
        "secret",
        "secrets",
        "password",
        "passwords",
        "passwd",
        "token",
        "credential",
        "credentials",
        "authorization",
        "cookie",
        "cookies",
    }
)
SECRET_PAIRS = frozenset({("api", "key"), ("access", "token"), ("private", "key")})

PEM_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----", re.IGNORECASE)
LOCAL_PATH = re.compile(r"(?<![A-Za-z0-9.~-])/(?:home|root|Users|etc|var|tmp|proc)/|(?<![A-Za-z0-9])[A-Za-z]:[\\/]")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")


def key_looks_secret(key: str) -> bool:
    """Return whether a result key names a secret (see the module docstring for the rule)."""
    words = [word for word in _SEPARATORS.split(_CAMEL.sub("_", key).lower()) if word]
    if any(word in SECRET_WORDS for word in words):
        return True
    return any(pair in SECRET_PAIRS for pair in zip(words, words[1:], strict=False))


def _string_problem(text: str) -> str:
    """Return the rule a string breaks, or "" when it is acceptable."""
    if PEM_PRIVATE_KEY.search(text):
        return "private key"
    if LOCAL_PATH.search(text):
        return "local filesystem path"
    return ""


def _reject(reason: str) -> tuple[bool, dict[str, str]]:
    return False, {"error": "output_rejected", "reason": reason}


def cross_boundary(value: Any) -> tuple[bool, Any]:
    """Return ``(True, value)`` when the result may reach the model, else ``(False, rejection)``.

    The rejection replaces the whole result; ``value`` itself is never modified.
    """
    # Walk without recursion so a hostile nesting cannot exhaust the stack.
    stack: list[tuple[Any, int, str]] = [(value, 0, "$")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth + 1 > MAX_DEPTH:
                return _reject(f"nesting deeper than {MAX_DEPTH} at {where}")
            if isinstance(item, dict):
                for key, child in item.items():
                    key_text = str(key)
                    # Paths first: the secret-key reason quotes the key, which must not carry a path itself.
                    problem = _string_problem(key_text)
                    if problem:
                        return _reject(f"{problem} in a key at {where}")
                    if key_looks_secret(key_text):
                        return _reject(f"secret-looking key {key_text[:64]!r} at {where}")
                    stack.append((child, depth + 1, f"{where}.{key_text[:64]}"))
            else:
                stack.extend((child, depth + 1, f"{where}[{index}]") for index, child in enumerate(item))
        elif isinstance(item, str):
            problem = _string_problem(item)
            if problem:
                return _reject(f"{problem} in a string at {where}")
    try:
        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode())
    except (TypeError, ValueError) as exc:
        return _reject(f"not JSON-serializable: {exc}")
    if size > MAX_BYTES:
        return _reject(f"larger than {MAX_BYTES} bytes as JSON ({size} bytes)")
    return True, value
