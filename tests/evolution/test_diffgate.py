"""The diff gate over a real clone: each refusal names the path and why; an allowed change passes with digests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from evolution.loop import diffgate
from evolution.loop.diffgate import GateRefused
from grading.models import Entity
from singularity.brain.git import clone, git
from tests.evolution.forge_helpers import DIGEST, DIGEST_PATH, ForgeBrain, edited_digest, forge_brain

pytestmark = pytest.mark.django_db


@pytest.fixture
def fb(tmp_path, settings) -> ForgeBrain:
    return forge_brain(tmp_path, settings)


def _gate(fb: ForgeBrain, tmp_path: Path, files: dict[str, str | None], *, entity: Entity | None = None, targets=None):
    """Write ``files`` into a fresh clone at main's tip and gate them; return (record, clone path)."""
    where = tmp_path / f"gate-{len(list(tmp_path.glob('gate-*')))}"
    checkout = clone(str(fb.brain.origin), where)
    base = checkout.head()
    proposal = [{"path": p, "content": c} for p, c in files.items()]
    diffgate.write_proposal(where, proposal)
    record = diffgate.check(where, base, entity or fb.digest, list(files) if targets is None else targets)
    return record, where


def _refused(fb, tmp_path, files, **kwargs) -> GateRefused:
    with pytest.raises(GateRefused) as refused:
        _gate(fb, tmp_path, files, **kwargs)
    return refused.value


def _set_loop(entity: Entity, **loop) -> Entity:
    terms = dict(entity.terms)
    terms["loop"] = {**terms["loop"], **loop}
    Entity.objects.filter(pk=entity.pk).update(terms=terms)
    entity.refresh_from_db()
    return entity


def test_an_allowed_change_passes_with_its_paths_lines_and_digests(fb, tmp_path):
    body = edited_digest()
    record, _ = _gate(fb, tmp_path, {DIGEST_PATH: body, "features/digest/new.md": "One.\nTwo.\n"})
    assert sorted(record["paths"]) == [DIGEST_PATH, "features/digest/new.md"]
    assert record["files"] == {DIGEST_PATH: 2, "features/digest/new.md": 2}
    assert record["lines"] == 4 and record["bound"] == 600
    assert record["digests"][DIGEST_PATH] == hashlib.sha256(body.encode()).hexdigest()
    assert record["base"] == fb.branch_sha("main")


def test_a_deletion_counts_the_whole_file_and_records_no_digest(fb, tmp_path):
    record, _ = _gate(fb, tmp_path, {"features/digest/notes.md": None})
    assert record["files"] == {"features/digest/notes.md": 2}
    assert record["digests"] == {"features/digest/notes.md": None}


def test_a_loop_module_is_refused(fb, tmp_path):
    refusal = _refused(fb, tmp_path, {"features/digest/digest.loop.py": "CASES = [1]\n"})
    assert refusal.paths == ["features/digest/digest.loop.py"]
    assert "a *.loop.py file" in refusal.message
    # a new one, anywhere, whatever its case
    refusal = _refused(fb, tmp_path, {"tools/Other.LOOP.py": "x = 1\n"})
    assert refusal.paths == ["tools/Other.LOOP.py"]


def test_the_judges_files_and_the_manifest_are_the_floor(fb, tmp_path):
    refusal = _refused(fb, tmp_path, {"constitution/Evaluation/Methods/default.md": "Judge kindly.\n"})
    assert "the judge's files" in refusal.message
    refusal = _refused(fb, tmp_path, {"constitution/MANIFEST.yaml": "loop:\n  maxChangedLines: 9000\n"})
    assert refusal.paths == ["constitution/MANIFEST.yaml"] and "the brain's manifest" in refusal.message


def test_another_entitys_definition_and_pipeline_are_refused(fb, tmp_path):
    refusal = _refused(
        fb,
        tmp_path,
        {
            "features/pricing/pricing.scenario.md": "---\nname: P\n---\nCheaper.\n",
            "features/pricing/pricing.pipeline.py": "PRICE = 1\n",
        },
    )
    assert sorted(refusal.paths) == ["features/pricing/pricing.pipeline.py", "features/pricing/pricing.scenario.md"]
    assert "the definition of scenario:pricing, another entity" in refusal.message
    # the pricing entity itself may change its own pipeline
    record, _ = _gate(fb, tmp_path, {"features/pricing/pricing.pipeline.py": "PRICE = 12\n"}, entity=fb.pricing)
    assert record["paths"] == ["features/pricing/pricing.pipeline.py"]


def test_the_proposer_pipelines_code_is_refused_to_every_entity(fb, tmp_path):
    fb.brain.commit({"features/digest/digest-proposer.pipeline.py": "def run(ctx, brief):\n    return None\n"})
    _set_loop(fb.pricing, proposer={"pipeline": "digest-proposer"})
    refusal = _refused(
        fb, tmp_path, {"features/digest/digest-proposer.pipeline.py": "def run(ctx, brief):\n    return 1\n"}
    )
    assert "the code of the proposer pipeline digest-proposer" in refusal.message


def test_protected_paths_add_to_the_floor_and_helpers_stay_open(fb, tmp_path):
    _set_loop(fb.digest, protectedPaths=["integrations/"])
    refusal = _refused(fb, tmp_path, {"integrations/billing.py": "RATE = 2\n"})
    assert refusal.paths == ["integrations/billing.py"]
    assert "protected by loop.protectedPaths (integrations/)" in refusal.message
    record, _ = _gate(fb, tmp_path, {"tools/helper.py": "def help():\n    return 2\n"})
    assert record["paths"] == ["tools/helper.py"]


def test_a_path_off_the_surface_is_refused_and_editable_paths_open_it(fb, tmp_path):
    files = {"features/digest/notes.md": "Shorter.\n", "features/digest/style.md": "Terse.\n"}
    refusal = _refused(fb, tmp_path, files, targets=["features/digest/notes.md"])
    assert refusal.paths == ["features/digest/style.md"]
    assert "not on this round's editable surface" in refusal.message
    _set_loop(fb.digest, editablePaths=["features/digest/**"])
    record, _ = _gate(fb, tmp_path, files, targets=["features/digest/notes.md"])
    assert sorted(record["paths"]) == ["features/digest/notes.md", "features/digest/style.md"]


@pytest.mark.parametrize(
    "old, new, how",
    [
        ("  maxChangedLines: 600\n", "  maxChangedLines: 6000\n", "changes its loop: block"),
        ("  method: none\n", "  method:  none\n", "changes its evaluation: block"),
        (
            "loop:\n  enabled: true\n  maxChangedLines: 600\n",
            "loop: {enabled: true, maxChangedLines: 600}\n",
            "changes its loop: block",
        ),
        ("---\nWrite", "chat:\n  onRoleChange: reset\n---\nWrite", "adds its chat: block"),
        ("loop:\n  enabled: true\n  maxChangedLines: 600\n", "", "removes its loop: block"),
    ],
)
def test_a_measurement_block_must_stay_byte_identical(fb, tmp_path, old, new, how):
    assert old in DIGEST
    refusal = _refused(fb, tmp_path, {DIGEST_PATH: DIGEST.replace(old, new, 1)})
    assert refusal.paths == [DIGEST_PATH]
    assert how in refusal.message and "must stay byte-identical" in refusal.message


def test_the_rest_of_an_entity_file_may_change(fb, tmp_path):
    text = DIGEST.replace("name: Digest", "name: Daily digest").replace("# The judge", "# Then the judge")
    record, _ = _gate(fb, tmp_path, {DIGEST_PATH: text.replace("Keep it short.", "Keep it under 200 words.")})
    assert record["paths"] == [DIGEST_PATH]


def test_too_many_lines_names_the_count_the_bound_and_the_three_largest(fb, tmp_path):
    _set_loop(fb.digest, maxChangedLines=10)
    files = {
        "features/digest/a.md": "a\n" * 8,
        "features/digest/b.md": "b\n" * 5,
        "features/digest/c.md": "c\n" * 3,
        "features/digest/d.md": "d\n",
    }
    refusal = _refused(fb, tmp_path, files)
    assert "17 lines (added + removed), past loop.maxChangedLines 10" in refusal.message
    assert (
        "the largest files: features/digest/a.md (8), features/digest/b.md (5), features/digest/c.md (3)"
        in refusal.message
    )
    assert refusal.paths == ["features/digest/a.md", "features/digest/b.md", "features/digest/c.md"]


def test_the_engine_bound_is_600_lines_inclusive(fb, tmp_path):
    record, _ = _gate(fb, tmp_path, {"features/digest/long.md": "x\n" * 600})
    assert record["lines"] == 600
    refusal = _refused(fb, tmp_path, {"features/digest/long.md": "x\n" * 601})
    assert "601 lines (added + removed), past loop.maxChangedLines 600" in refusal.message


def test_a_binary_file_is_refused_not_counted(fb, tmp_path):
    refusal = _refused(fb, tmp_path, {"features/digest/logo.txt": "GIF89a\x00\x01"})
    assert refusal.paths == ["features/digest/logo.txt"] and "a binary file" in refusal.message


@pytest.mark.parametrize(
    "path, why",
    [
        ("features/../constitution/MANIFEST.yaml", "a '..' segment"),
        ("features/**", "a glob"),
        ("features/digest/*.md", "a glob"),
        ("features/digest/note?.md", "a glob"),
        ("/etc/passwd", "an absolute path"),
        (".git/config", "inside .git"),
        ("features//x.md", "not a plain file path"),
    ],
)
def test_validate_paths_refuses_patterns_and_escapes(path, why):
    with pytest.raises(GateRefused) as refused:
        diffgate.validate_paths(["features/digest/notes.md", path])
    assert refused.value.paths == [path] and f"{path}: {why}" in refused.value.message


def test_validate_paths_refuses_a_path_named_twice():
    with pytest.raises(GateRefused, match="named twice"):
        diffgate.validate_paths(["a.md", "a.md"])


def _commit_link(fb: ForgeBrain, path: str, target: str) -> None:
    work = fb.brain.work.path
    (work / path).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, work / path)
    git("add", "--all", ".", cwd=work)
    git("commit", "--quiet", "-m", "a link", cwd=work)
    git("push", "--quiet", "origin", "main", cwd=work)


def test_a_path_under_a_tracked_link_is_refused_before_anything_is_written(fb, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text("root\n")
    _commit_link(fb, "features/x", str(outside))
    for content in ("evil\n", None):
        with pytest.raises(GateRefused) as refused:
            _gate(fb, tmp_path, {"features/x/passwd": content})
        assert refused.value.paths == ["features/x/passwd"] and "under features/x, a symlink" in refused.value.message
    assert (outside / "passwd").read_text() == "root\n"


def test_a_tracked_link_itself_is_not_written_through(fb, tmp_path):
    _commit_link(fb, "features/digest/alias.md", "notes.md")
    refusal = _refused(fb, tmp_path, {"features/digest/alias.md": "Through the link.\n"})
    assert "features/digest/alias.md" in refusal.paths and "symlink" in refusal.message


def test_the_gate_reads_a_symlink_off_the_tree(fb, tmp_path):
    where = tmp_path / "tree"
    checkout = clone(str(fb.brain.origin), where)
    os.symlink("/etc/passwd", where / "features/digest/link.md")
    with pytest.raises(GateRefused) as refused:
        diffgate.check(where, checkout.head(), fb.digest, ["features/digest/link.md"])
    assert refused.value.paths == ["features/digest/link.md"]
    assert "a symlink (a change writes regular files only)" in refused.value.message


def test_the_gate_reads_the_tree_not_the_proposals_word(fb, tmp_path):
    where = tmp_path / "tree"
    checkout = clone(str(fb.brain.origin), where)
    (where / "features/digest/notes.md").write_text("Changed.\n")
    (where / "features/digest/digest.loop.py").write_text("CASES = ['sneaked']\n")
    with pytest.raises(GateRefused) as refused:
        diffgate.check(where, checkout.head(), fb.digest, ["features/digest/notes.md"])
    assert refused.value.paths == ["features/digest/digest.loop.py"]


def test_a_change_that_changes_nothing_is_refused(fb, tmp_path):
    refusal = _refused(fb, tmp_path, {"features/digest/notes.md": "Line one.\nLine two.\n"})
    assert "changes nothing" in refusal.message


def test_deleting_a_missing_file_is_refused(fb, tmp_path):
    refusal = _refused(fb, tmp_path, {"features/digest/gone.md": None})
    assert refusal.paths == ["features/digest/gone.md"] and "no such file" in refusal.message


def test_every_problem_is_named_at_once(fb, tmp_path):
    refusal = _refused(
        fb, tmp_path, {"constitution/MANIFEST.yaml": "x: 1\n", "features/digest/digest.loop.py": "y = 2\n"}
    )
    assert refusal.paths == ["constitution/MANIFEST.yaml", "features/digest/digest.loop.py"]
    assert refusal.message.count("\n- ") == 2


def test_verify_digests_catches_a_write_after_the_gate(fb, tmp_path):
    record, where = _gate(fb, tmp_path, {"features/digest/notes.md": "Shorter.\n"})
    diffgate.verify_digests(where, record)
    (where / "features/digest/notes.md").write_text("Something else.\n")
    with pytest.raises(GateRefused, match=r"features/digest/notes\.md: changed after the gate read it \(in the tree\)"):
        diffgate.verify_digests(where, record)


def test_surface_renders_editable_denied_and_the_bound(fb):
    _set_loop(fb.digest, editablePaths=["features/digest/**"], protectedPaths=["integrations/"], maxChangedLines=400)
    shown = diffgate.surface(fb.digest, ["features/digest/notes.md"]).as_dict()
    assert shown["editable"] == ["features/digest/notes.md", "features/digest/**"]
    denied = [d["path"] for d in shown["denied"]]
    assert "**/*.loop.py" in denied and "constitution/MANIFEST.yaml" in denied and "integrations" in denied
    assert "features/pricing/pricing.scenario.md" in denied and DIGEST_PATH not in denied
    assert shown["maxChangedLines"] == 400


@pytest.mark.parametrize(
    "pattern, path, hit",
    [
        ("features/daily/**", "features/daily/a/b.md", True),
        ("features/daily/**", "features/other/a.md", False),
        ("**/*.loop.py", "a.loop.py", True),
        ("**/*.loop.py", "x/y/a.loop.py", True),
        ("features/*.md", "features/a/b.md", False),
        ("features/[ab].md", "features/b.md", True),
    ],
)
def test_glob_rules(pattern, path, hit):
    assert diffgate.Rule.of(pattern, "why").matches(path) is hit


# --- The judge's and the loop's own files; lock groups' shared files (R10.3, R10.21) --------------


@pytest.mark.parametrize(
    "path",
    [
        "constitution/Agents/system/role-evaluator.md",
        "constitution/Agents/system/role-general.md",
        "constitution/Agents/system/loop/role-proposer.md",
        "constitution/Loop/chat-privacy.md",
        "constitution/Loop/proposer/workflow.md",
    ],
)
def test_the_judges_role_and_the_loops_own_prompts_are_the_floor(fb, tmp_path, path):
    refusal = _refused(fb, tmp_path, {path: "Grade everything 1.0.\n"})
    assert refusal.paths == [path] and "engine floor" in refusal.message


def _grouped(entity: Entity, *, groups: list[str], editable: list[str] | None = None) -> Entity:
    loop = {"groups": {"audience": {"lock": True, "repair": "bypass"}}, "group": groups}
    if editable is not None:
        loop["editablePaths"] = editable
    return _set_loop(entity, **loop)


SHARED_ROLE = "features/digest/writer.agent.md"


def test_a_members_change_may_not_rewrite_a_shared_role_its_editable_paths_do_not_list(fb, tmp_path):
    fb.commit_main({SHARED_ROLE: "---\nname: Writer\n---\nWrite.\n"})
    digest = _grouped(fb.digest, groups=["audience"])
    refusal = _refused(fb, tmp_path, {SHARED_ROLE: "---\nname: Writer\n---\nWrite better.\n"}, entity=digest)
    assert refusal.paths == [SHARED_ROLE] and "the lock group's members share" in refusal.message
    digest = _grouped(fb.digest, groups=["audience"], editable=[SHARED_ROLE])
    record, _ = _gate(fb, tmp_path, {SHARED_ROLE: "---\nname: Writer\n---\nWrite better.\n"}, entity=digest)
    assert record["paths"] == [SHARED_ROLE]


def test_a_member_may_create_a_new_shared_file(fb, tmp_path):
    digest = _grouped(fb.digest, groups=["audience"])
    record, _ = _gate(fb, tmp_path, {"skills/summarise/SKILL.md": "Summarise.\n"}, entity=digest)
    assert record["paths"] == ["skills/summarise/SKILL.md"]


def test_what_a_member_claims_is_closed_to_an_entity_sharing_no_group_with_it(fb, tmp_path):
    fb.commit_main({SHARED_ROLE: "---\nname: Writer\n---\nWrite.\n"})
    _grouped(fb.pricing, groups=["audience"], editable=[SHARED_ROLE])
    refusal = _refused(fb, tmp_path, {SHARED_ROLE: "---\nname: Writer\n---\nWrite worse.\n"})
    assert refusal.paths == [SHARED_ROLE] and "claimed by scenario:pricing's loop.editablePaths" in refusal.message
