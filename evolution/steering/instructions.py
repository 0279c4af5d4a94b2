"""The loop's prompts as instruction modules (seed 003, "Overriding the prompts"; R8.32, R8.33): instruction_list,
instruction_get, instruction_write_file and instruction_reset.

A module is ``loop/<path>`` (``evolution.core.prompts.MODULES``); the first write forks the engine's template into
``constitution/Loop/<path>.md``, reset removes the copy so the engine's template is read again. A copy naming a
placeholder the loop does not fill in that brief is refused ``invalid`` naming it and its line. The list says
which of the loop's agents read each module and which entities' analyses read it now — ``usedBy`` null, with
``unread`` saying why, when MANIFEST.yaml or an entity does not load (the prompt files still read).
"""

from __future__ import annotations

from typing import Any

from evolution.core import prompts
from evolution.steering.brain_files import FileAnswer, write_file
from evolution.steering.settings.base import INVALID, NOT_FOUND, SettingsRefusal
from singularity.brain.git import GitError
from singularity.errors import SingularityError

OP_WRITE, OP_RESET = "instruction_write", "instruction_reset"


def module_named(path: str) -> prompts.Module:
    """The module ``path`` names; SettingsRefusal(not_found) listing the modules when it names none."""
    module = prompts.MODULES.get(str(path or "").strip())
    if module is None:
        known = ", ".join(prompts.MODULES)
        raise SettingsRefusal(NOT_FOUND, f"{path!r} is no instruction module: the loop's prompts are {known}")
    return module


def _checkout(checkout: Any | None) -> Any:
    if checkout is not None:
        return checkout
    from grading.sync import current_checkout

    return current_checkout()


def _read(module: prompts.Module, checkout: Any | None) -> tuple[bytes, str]:
    """(the bytes the loop reads now, "brain" or "engine"): the brain's copy at its head, else the engine's."""
    repo = _checkout(checkout)
    try:
        return repo.read_at(repo.head(), module.brain_path), "brain"
    except GitError:
        return module.engine.read_bytes(), "engine"


def _uses(definition: Any, module: prompts.Module) -> bool:
    """Whether the analysis of the loaded entity ``definition`` reads ``module`` now."""
    loop = (definition.terms or {}).get("loop") or {}
    if not loop.get("enabled"):
        return False
    if module.name == "proposer/idea":
        return True
    if module.name == "chat-privacy":
        return definition.kind == "role"
    if loop.get("preset") == "evolve":
        return module.name == "proposer/evolve"
    kind = {"role": "chat"}.get(definition.kind, definition.kind)
    return module.name == f"proposer/{kind}"


def _users(checkout: Any | None) -> tuple[dict[str, list[str]] | None, str | None]:
    """Each module's users at the brain's head, or (None, why) when the manifest or an entity does not load."""
    from singularity.brain.loader import load_brain

    try:
        repo = _checkout(checkout)
        snapshot = load_brain(repo, repo.head())
    except SingularityError as exc:
        return None, f"the brain does not load: {exc}"
    if snapshot.errors:
        return None, f"constitution/MANIFEST.yaml does not load: {snapshot.errors[0]}"
    broken = [e.path for e in snapshot.entities if e.error]
    if broken:
        return None, f"{len(broken)} entity file(s) do not load ({', '.join(broken[:3])}): who reads what is unknown"
    users: dict[str, list[str]] = {path: [] for path in prompts.MODULES}
    for definition in sorted(snapshot.entities, key=lambda e: (e.target_kind, e.slug)):
        for path, module in prompts.MODULES.items():
            if _uses(definition, module):
                users[path].append(f"{definition.target_kind}:{definition.slug}")
    return users, None


def _row(module: prompts.Module, checkout: Any | None) -> dict[str, Any]:
    from evolution.steering.settings.write import digest

    data, source = _read(module, checkout)
    return {
        "path": module.path,
        "file": module.brain_path,
        "source": source,
        "sha": digest(data),
        "loop": {"agents": list(module.agents), "when": module.when},
        "placeholders": sorted(module.fills),
        "_content": data.decode("utf-8", "replace"),
    }


def instruction_list(*, checkout: Any | None = None) -> list[dict[str, Any]]:
    """Every loop prompt: where it is read from, its sha, who reads it and when, the entities using it now."""
    users, unread = _users(checkout)
    rows = []
    for path, module in prompts.MODULES.items():
        row = _row(module, checkout)
        row.pop("_content")
        row["usedBy"] = users[path] if users is not None else None
        row["unread"] = unread
        rows.append(row)
    return rows


def instruction_get(path: str, *, checkout: Any | None = None) -> dict[str, Any]:
    """One loop prompt with its content and the sha a write swaps against; SettingsRefusal(not_found)."""
    row = _row(module_named(path), checkout)
    row["content"] = row.pop("_content")
    return row


def _check(module: prompts.Module) -> Any:
    def check(data: bytes | None) -> None:
        if data is None:
            return
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SettingsRefusal(INVALID, f"{module.brain_path}: not UTF-8 text") from None
        # A blank chat-privacy copy means "no privacy rule" (grading.chat.transcript); a blank brief means nothing.
        if not text.strip() and module.fills:
            raise SettingsRefusal(INVALID, f"{module.brain_path}: empty; reset the module to read the engine's")
        why = prompts.refusal(module, text)
        if why:
            raise SettingsRefusal(INVALID, why)

    return check


def instruction_write_file(
    path: str, content: str, *, sha: str | None, actor: str, dry_run: bool = False
) -> FileAnswer:
    """Write the brain's copy of module ``path`` (the first write forks the template); SettingsRefusal naming why."""
    module = module_named(path)
    return write_file(
        module.brain_path,
        content.encode("utf-8", "surrogatepass"),
        expect=sha,
        fallback=module.engine.read_bytes(),
        check=_check(module),
        actor=actor,
        op=OP_WRITE,
        subject=module.path,
        dry_run=dry_run,
    )


def instruction_reset(path: str, *, sha: str | None, actor: str, dry_run: bool = False) -> FileAnswer:
    """Remove the brain's copy of module ``path`` so the engine's template is read again (unchanged when none)."""
    module = module_named(path)
    return write_file(
        module.brain_path,
        None,
        expect=sha,
        fallback=module.engine.read_bytes(),
        check=_check(module),
        actor=actor,
        op=OP_RESET,
        subject=module.path,
        dry_run=dry_run,
    )
