"""Doctor, Loop confinement (R8.19): a proposer or implementer role resolving to '*' or a shell is named."""

from __future__ import annotations

import pytest

from grading.doctor import run_doctor
from tests.grading.brain_helpers import Brain

pytestmark = pytest.mark.django_db

PROPOSER = "constitution/Agents/system/loop/role-proposer.md"
IMPLEMENTER = "constitution/Agents/system/loop/role-implementer.md"
GENERAL = "constitution/Agents/system/role-general.md"


def found(tmp_path, files: dict[str, str]) -> list[str]:
    brain = Brain(tmp_path, files)
    return [f.line() for f in run_doctor(checkout=brain.checkout, only=["Loop confinement"]) if f.level != "pass"]


def role(capabilities: str) -> str:
    return f"---\nname: proposer\ncapabilities: {capabilities}\n---\nPropose.\n"


def test_a_proposer_copy_granting_everything_warns(tmp_path):
    [line] = found(tmp_path, {PROPOSER: role("['*']")})
    assert "[warn]" in line and PROPOSER in line and "'*'" in line and "read-only" in line


def test_an_implementer_copy_with_a_shell_warns(tmp_path):
    [line] = found(tmp_path, {IMPLEMENTER: role("[file:read, file:write, shell:exec]")})
    assert "[warn]" in line and "implementer" in line and "shell" in line


def test_a_general_role_granting_a_shell_reaches_the_proposer_through_the_union(tmp_path):
    lines = found(tmp_path, {GENERAL: role("[bash]"), PROPOSER: role("[file:read, db:read, loop:read]")})
    assert any("proposer" in line and "role-general.md" in line for line in lines), lines


def test_the_engines_read_only_grant_is_confined(tmp_path):
    assert found(tmp_path, {PROPOSER: role("[file:read, db:read, loop:read]")}) == []
    assert found(tmp_path / "none", {"README.md": "a brain without copies\n"}) == []


@pytest.mark.django_db(transaction=True)
def test_the_proposers_reads_are_checked_and_a_role_that_cannot_log_in_warns(settings):
    def lines() -> list[str]:
        return [f.line() for f in run_doctor(only=["Loop proposer reads"]) if f.level != "pass"]

    assert lines() == []
    settings.LOOP_READ_DB_USER = "nobody_at_all"
    from django.db import connection

    if connection.vendor == "postgresql":
        [line] = lines()
        assert "[warn]" in line and "nobody_at_all" in line and "fails" in line


@pytest.mark.django_db(transaction=True)
def test_a_read_role_that_reaches_past_its_views_warns():
    from django.db import connection

    from evolution.investigate.views_sql import ROLE

    if connection.vendor != "postgresql":
        pytest.skip("on SQLite the authorizer is the engine's own, never granted wider")
    with connection.cursor() as cursor:
        cursor.execute(f"GRANT SELECT ON django_migrations TO {ROLE}")
    try:
        [line] = [f.line() for f in run_doctor(only=["Loop proposer reads"]) if f.level != "pass"]
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"REVOKE SELECT ON django_migrations FROM {ROLE}")
    assert "[warn]" in line and "django_migrations, a table outside its views" in line
