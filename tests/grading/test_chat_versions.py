"""A role's version is what it DOES: body, frontmatter outside the measurement blocks, named skills (R22.8)."""

from __future__ import annotations

import pytest

from grading.chat.versions import role_version, version_hash
from tests.grading.chat_helpers import make_role
from tests.grading.grading_helpers import brain_repo, commit_files

FRONTMATTER = {"name": "Support", "skills": ["refunds"], "capabilities": ["episode:write"]}


def test_the_version_changes_with_the_body():
    assert version_hash("You answer.", FRONTMATTER, {}) != version_hash("You answer briefly.", FRONTMATTER, {})


def test_the_version_changes_with_the_frontmatter_outside_the_measurement_blocks():
    other = {**FRONTMATTER, "capabilities": []}
    assert version_hash("You answer.", FRONTMATTER, {}) != version_hash("You answer.", other, {})


@pytest.mark.parametrize("block", ["evaluation", "loop", "chat", "budget"])
def test_a_measurement_block_is_not_part_of_the_version(block):
    measured = {**FRONTMATTER, block: {"enabled": True, "requirements": ["Polite"], "episode": {"idleHours": 1}}}
    assert version_hash("You answer.", FRONTMATTER, {}) == version_hash("You answer.", measured, {})


def test_the_version_changes_with_a_named_skill(tmp_path, db):
    checkout, first = brain_repo(tmp_path / "brain", {"skills/refunds/SKILL.md": "Refund within 30 days."})
    role = make_role(skills=["refunds"])
    role.commit = first
    before = role_version(role, checkout=checkout)
    assert before.skills == {"refunds": "Refund within 30 days."}
    role.commit = commit_files(checkout, {"skills/refunds/SKILL.md": "Refund within 14 days."})
    after = role_version(role, checkout=checkout)
    assert after.hash != before.hash
    role.commit = commit_files(checkout, {"skills/other/SKILL.md": "Not named by the role."})
    assert role_version(role, checkout=checkout).hash == after.hash, "a skill the role does not name is not its"


def test_a_named_skill_the_brain_lacks_reads_as_none(tmp_path, db):
    checkout, commit = brain_repo(tmp_path / "brain", {"README.md": "brain"})
    role = make_role(skills=["missing"])
    role.commit = commit
    assert role_version(role, checkout=checkout).skills == {"missing": None}
