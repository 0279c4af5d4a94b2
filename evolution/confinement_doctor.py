"""The doctor's "Loop confinement" (seed 003 R8.19): a loop role whose grant resolves to '*' or a shell.

A role's grant is its copy's ``capabilities:`` (the brain's ``constitution/Agents/system/loop/role-<name>.md``
replacing the engine's whole) unioned with ``role-general.md``'s. This engine hands the proposer agent only its
read-only tools (``evolution.investigate``) and writes an accepted change itself, whatever a copy says; the
warning is that the brain's files say otherwise — the grant a person reads is not the one meant.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from grading.doctor import WARN, Check, DoctorContext, section

ROLES = {
    "proposer": "constitution/Agents/system/loop/role-proposer.md",
    "implementer": "constitution/Agents/system/loop/role-implementer.md",
}
GENERAL = "constitution/Agents/system/role-general.md"
#: Capability words that stand for a subprocess the surface cannot see.
SHELL_WORDS = ("shell", "bash", "exec", "terminal", "process", "subprocess", "command")


def _capabilities(ctx: DoctorContext, commit: str, path: str) -> list[str] | None:
    """The ``capabilities:`` the file at ``path`` declares (as words), None when there is no such file or block."""
    from grading.judge import split_frontmatter

    assert ctx.checkout is not None
    if not ctx.checkout.exists_at(commit, path):
        return None
    try:
        frontmatter, _ = split_frontmatter(ctx.checkout.read_at(commit, path).decode("utf-8"))
    except Exception:  # noqa: BLE001 - a copy that does not read is the Loop role memory section's to name
        return None
    found: Any = frontmatter.get("capabilities") if isinstance(frontmatter, dict) else None
    if found is None:
        return None
    if isinstance(found, str | dict):
        found = [found] if isinstance(found, str) else list(found)
    return [str(item).strip() for item in found if str(item).strip()]


def _wide(capabilities: list[str]) -> list[str]:
    """The capabilities that are '*' or a shell."""
    return [c for c in capabilities if c == "*" or c.split(":", 1)[0].lower() in SHELL_WORDS]


RISK = "a shell or '*' would let it read the judge's files past the read wall and write outside any diff."
AFTER = {
    "proposer": "This engine still gives the proposer only its read-only tools; write the grant it has "
    "(file:read, db:read, loop:read).",
    "implementer": "This engine opens no implementer agent (it writes an accepted change itself through the diff "
    "gate); drop the grant.",
}


@section("Loop confinement")
def loop_confinement_section(ctx: DoctorContext) -> Iterator[Check]:
    snapshot = ctx.snapshot()
    if snapshot is None or ctx.checkout is None:
        return
    general = _capabilities(ctx, snapshot.commit, GENERAL) or []
    for name, path in ROLES.items():
        own = _capabilities(ctx, snapshot.commit, path) or []
        for capability, where in [*((c, path) for c in _wide(own)), *((c, GENERAL) for c in _wide(general))]:
            what = "'*' (everything)" if capability == "*" else f"a shell ({capability!r})"
            yield Check(WARN, f"the loop's {name} resolves to {what} through {where}: {RISK} {AFTER[name]}")


@section("Loop proposer reads")
def loop_proposer_reads_section(ctx: DoctorContext) -> Iterator[Check]:
    """Whether the proposer's db_query can read its views (on Postgres: log in as the read-only role)."""
    from django.conf import settings

    from evolution.investigate.database import Reader

    reader = Reader()
    try:
        problem = reader.problem()
    finally:
        reader.close()
    if problem:
        yield Check(
            WARN,
            f"the proposer's db_query cannot be used: {problem}. On Postgres it logs in as the role "
            f"{settings.LOOP_READ_DB_USER} (LOOP_READ_DB_USER); `manage.py migrate` makes singularity_proposer, "
            "grants it SELECT on the ro_* views and gives it a password derived from SECRET_KEY when its database "
            "user may (CREATEROLE); else a person makes the role (CREATE ROLE … LOGIN, GRANT SELECT ON the ro_* "
            "views) and sets LOOP_READ_DB_PASSWORD. Until then the proposer reads files only",
        )
