"""Which capabilities wait on a person (``hitl: true``): the engine's catalogue, relaxed per capability by the brain's
``constitution/engine-capabilities.json`` (seed 003, "Loop autonomy"; R12.21), and what a role file grants.

The catalogue names the capabilities the seed gives a person's gate by default — an agent's rating (``eval:rate``),
an analysis or an idea (``loop:analyze``), a supervision move (``loop:supervise``), a standing auto-accept
(``loop:auto_accept``) — and the read-only or self-contained ones that ask nobody. A capability the catalogue does not
know asks nobody. The brain's file is a JSON object ``{"<capability>": {"hitl": true|false}, …}``.
"""

from __future__ import annotations

import json
from typing import Any

from singularity.brain import frontmatter
from singularity.errors import ConfigError

CAPABILITIES_PATH = "constitution/engine-capabilities.json"
GENERAL_ROLE_PATH = "constitution/Agents/system/role-general.md"
#: A grant of every capability.
EVERY = "*"

#: The engine's capabilities and whether each waits on a person (hitl).
ENGINE: dict[str, bool] = {
    "file:read": False,
    "file:write": False,
    "db:read": False,
    "loop:read": False,
    "eval:read": False,
    "episode:write": False,
    "loop:hold": False,
    "loop:configure": False,
    "eval:rate": True,
    "loop:analyze": True,
    "loop:supervise": True,
    "loop:auto_accept": True,
}


def hitl_catalogue(checkout: Any, commit: str) -> dict[str, bool]:
    """The engine's catalogue with the brain's ``engine-capabilities.json`` laid over it; ConfigError naming the file
    and the capability when the file does not read."""
    catalogue = dict(ENGINE)
    if not checkout.exists_at(commit, CAPABILITIES_PATH):
        return catalogue
    try:
        data = json.loads(checkout.read_at(commit, CAPABILITIES_PATH).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{CAPABILITIES_PATH}: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{CAPABILITIES_PATH}: must be an object of capabilities, not {type(data).__name__}")
    for name, entry in data.items():
        hitl = entry.get("hitl") if isinstance(entry, dict) else None
        if not isinstance(hitl, bool):
            raise ConfigError(f"{CAPABILITIES_PATH}: {name}: expected {{hitl: true|false}}, not {entry!r}")
        catalogue[str(name)] = hitl
    return catalogue


def grant_of(text: str, *, path: str) -> set[str]:
    """The capabilities a role file's frontmatter grants (``capabilities:``, a list); ConfigError naming the file."""
    data, _body = frontmatter.parse(text, path=path)
    granted = data.get("capabilities") or []
    if isinstance(granted, str):
        granted = [granted]
    if not isinstance(granted, list):
        raise ConfigError(f"{path}: capabilities: expected a list, not {type(granted).__name__}")
    return {str(name) for name in granted}


def reached(grant: set[str], catalogue: dict[str, bool]) -> list[str]:
    """The hitl: true capabilities ``grant`` reaches (every one of them under ``*``), sorted."""
    if EVERY in grant:
        return sorted(name for name, hitl in catalogue.items() if hitl)
    return sorted(name for name in grant if catalogue.get(name, False))
