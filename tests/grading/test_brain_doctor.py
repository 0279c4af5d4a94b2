"""manage.py doctor over a real brain: each section's pass, warn and fail lines, and the exit code."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from grading import doctor
from grading.doctor import Check, run_doctor
from grading.sync import sync_brain
from tests.grading.brain_helpers import SCENARIO, Brain, md

pytestmark = pytest.mark.django_db

MANIFEST = "constitution/MANIFEST.yaml"


def lines(brain: Brain, section: str) -> list[str]:
    sync_brain(checkout=brain.checkout)
    return [f.line() for f in run_doctor(checkout=brain.checkout, only=[section])]


def heartbeat(extra: str = "") -> str:
    return md(f"schedule: '0 * * * *'\nevaluation:\n  enabled: true\n{extra}")


# ---------------------------------------------------------------------------
# Brain


def test_a_healthy_brain_passes_and_the_command_exits_0(tmp_path, settings):
    brain = Brain(tmp_path, {"features/d/digest.scenario.md": SCENARIO})
    sync_brain(checkout=brain.checkout)
    settings.BRAIN_CHECKOUT = brain.checkout.path
    out = StringIO()
    call_command("doctor", stdout=out)
    text = out.getvalue()
    assert f"[pass] Brain: 1 entities load at {brain.checkout.head()[:12]}" in text
    assert "[fail]" not in text
    assert all(line.startswith(("[pass] ", "[warn] ")) for line in text.splitlines())


def test_a_broken_entity_fails_the_brain_section_and_the_command_exits_1(tmp_path, settings):
    brain = Brain(
        tmp_path,
        {"features/d/digest.scenario.md": SCENARIO, "features/b/bad.scenario.md": md("loop:\n  preset: grow")},
    )
    sync_brain(checkout=brain.checkout)
    settings.BRAIN_CHECKOUT = brain.checkout.path
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("doctor", stdout=out)
    assert caught.value.returncode == 1
    assert (
        "[fail] Brain: scenario:bad does not load: features/b/bad.scenario.md: loop.preset: "
        "must be one of repair | evolve, not 'grow'"
    ) in out.getvalue()


def test_brain_wide_and_method_errors_fail(tmp_path):
    brain = Brain(
        tmp_path,
        {
            MANIFEST: "loop:\n  groups:\n    Audience: {}\n",
            "constitution/Evaluation/Methods/loose.md": "# Evaluate\n",
            "features/d/digest.scenario.md": SCENARIO,
        },
    )
    found = lines(brain, "Brain")
    assert (
        "[fail] Brain: constitution/MANIFEST.yaml: loop.groups.Audience: a group id is lowercase letters, digits, _ and -"
        in found
    )
    assert any(line.startswith("[fail] Brain: method loose: ") and "# Run Evaluation" in line for line in found)


def test_an_entity_naming_a_method_the_brain_lacks_fails(tmp_path):
    brain = Brain(tmp_path, {"features/d/digest.scenario.md": md("evaluation:\n  enabled: true\n  method: strict")})
    assert any(
        "evaluation.method 'strict' names no file" in line and line.startswith("[fail]")
        for line in lines(brain, "Brain")
    )


def test_rows_behind_the_brain_warn_that_a_sync_is_due(tmp_path):
    brain = Brain(tmp_path, {"features/d/digest.scenario.md": SCENARIO})
    sync_brain(checkout=brain.checkout)
    brain.commit({"features/d/digest.scenario.md": md("name: New")})
    brain.checkout.fetch()
    found = [f.line() for f in run_doctor(checkout=brain.checkout, only=["Brain"])]
    assert any(line.startswith("[warn] Brain: rows from ") and "a sync is due" in line for line in found)


# ---------------------------------------------------------------------------
# Eval ceilings


def test_an_unattended_entity_with_no_ceiling_anywhere_is_named(tmp_path):
    brain = Brain(
        tmp_path,
        {
            "features/o/pulse.heartbeat.md": heartbeat(),
            "features/o/nightly.scenario.md": md("schedule: '0 3 * * *'\nevaluation:\n  enabled: true"),
            "features/o/manual.scenario.md": md("evaluation:\n  enabled: true"),
            "features/o/counted.heartbeat.md": heartbeat("  method: none"),
            "features/o/capped.heartbeat.md": heartbeat("  sample: { maxPerDay: 5 }"),
        },
    )
    found = lines(brain, "Eval ceilings")
    warned = [line for line in found if line.startswith("[warn]")]
    assert len(warned) == 2, found
    assert any("heartbeat:pulse is unattended (a heartbeat)" in line for line in warned)
    assert any("scenario:nightly is unattended (a scenario on schedule '0 3 * * *')" in line for line in warned)


def test_a_ceiling_in_the_manifest_covers_the_whole_brain(tmp_path):
    brain = Brain(
        tmp_path,
        {MANIFEST: "evaluation:\n  sample: { maxPerDay: 50 }\n", "features/o/pulse.heartbeat.md": heartbeat()},
    )
    assert lines(brain, "Eval ceilings") == ["[pass] Eval ceilings: nothing to report"]


def test_a_grade_lag_past_the_watch_deadline_warns(tmp_path):
    brain = Brain(
        tmp_path,
        {
            "features/d/late.scenario.md": md(
                "evaluation:\n  enabled: true\n  gradeAfterHours: 400\nloop:\n  enabled: true"
            )
        },
    )
    found = lines(brain, "Eval ceilings")
    assert any(line.startswith("[warn] Eval ceilings: scenario:late: gradeAfterHours 400") for line in found)


# ---------------------------------------------------------------------------
# Loop modules

COMPUTED = (
    "evaluation:\n  enabled: true\n  metrics:\n    delivery_rate: { kind: computed, direction: max, role: objective }"
)


def test_a_computed_metric_with_no_loop_module_fails_naming_the_ids(tmp_path):
    brain = Brain(tmp_path, {"features/d/brief.scenario.md": md(COMPUTED)})
    found = lines(brain, "Loop modules")
    assert found[0].startswith("[fail] Loop modules: scenario:brief declares computed metrics delivery_rate")


def test_a_loop_module_that_does_not_import_fails(tmp_path):
    brain = Brain(
        tmp_path,
        {
            "features/d/brief.scenario.md": md(COMPUTED),
            "features/d/brief.loop.py": "import no_such_module_here\n",
        },
    )
    found = lines(brain, "Loop modules")
    assert len(found) == 1
    assert found[0].startswith(
        "[fail] Loop modules: scenario:brief: loop module features/d/brief.loop.py does not import"
    )
    assert "ModuleNotFoundError" in found[0]


PERIOD = (
    "evaluation:\n  enabled: true\n  metrics:\n"
    "    followers: { kind: computed, scope: period, direction: max, role: objective }"
)


def test_a_period_metric_with_a_verdict_role_under_repair_and_no_compare_warns(tmp_path):
    brain = Brain(
        tmp_path,
        {
            "features/s/shorts.scenario.md": md(PERIOD),
            "features/s/shorts.loop.py": "def window(ctx):\n    return None\n",
            "features/s/compared.scenario.md": md(PERIOD),
            "features/s/compared.loop.py": "def compare(ctx, before, after):\n    return None\n",
            "features/s/evolving.scenario.md": md(PERIOD + "\nloop:\n  preset: evolve"),
        },
    )
    found = lines(brain, "Loop modules")
    assert len(found) == 1, found
    assert found[0].startswith("[warn] Loop modules: scenario:shorts: period metric(s) followers")


# ---------------------------------------------------------------------------
# Loop check

REPORTED = (
    "evaluation:\n  enabled: true\n  metrics:\n"
    "    helpful: { kind: reported, direction: max, role: objective, criterion: Solved }\n"
    "loop:\n  enabled: true\n"
)


def test_a_reported_objective_on_a_replayed_workflow_warns(tmp_path):
    brain = Brain(
        tmp_path,
        {
            "features/c/support.scenario.md": md(REPORTED),
            "features/c/unreplayed.scenario.md": md(REPORTED + "  check: { mode: none }"),
        },
    )
    found = [line for line in lines(brain, "Loop check") if "reported objective" in line]
    assert len(found) == 1, found
    assert found[0].startswith("[warn] Loop check: scenario:support: reported objective helpful")


def test_the_loop_check_findings(tmp_path):
    # R11.35 / R11.3: a heartbeat declaring replay in its own frontmatter fails; a workflow declaring none is named;
    # fewer freezable inputs than check.inputs warns; no held-out input possible hints.
    brain = Brain(
        tmp_path,
        {
            "features/h/pulse.heartbeat.md": heartbeat("loop:\n  enabled: true\n  check: { mode: replay }"),
            "features/c/quiet.scenario.md": md(
                "evaluation:\n  enabled: true\nloop:\n  enabled: true\n  check: { mode: none }"
            ),
            "features/c/thin.scenario.md": md(
                "evaluation:\n  enabled: true\nloop:\n  enabled: true\n  check: { inputs: 1, mode: replay }"
            ),
        },
    )
    found = lines(brain, "Loop check")
    assert any(line.startswith("[fail] Loop check: heartbeat:pulse: declares check.mode replay") for line in found)
    assert any("scenario:quiet: a replayable workflow that declares check.mode none" in line for line in found)
    thin = [line for line in found if "scenario:thin" in line]
    assert any(
        "0 distinct graded input(s) and 0 golden case(s) to freeze, fewer than check.inputs 1" in t for t in thin
    )
    assert any("hint: no held-out input is possible (check.inputs is below 2)" in t for t in thin)


# ---------------------------------------------------------------------------
# Human calibration and Loop autonomy


def test_a_partial_human_block_names_the_keys_it_drops_from_the_manifest(tmp_path):
    brain = Brain(
        tmp_path,
        {
            MANIFEST: "evaluation:\n  human:\n    ask: always\n    expiresHours: 12\n    agreement: { minPairs: 3 }\n",
            "features/d/digest.scenario.md": md("evaluation:\n  enabled: true\n  human: { ask: always }"),
            "features/d/silent.scenario.md": md("evaluation:\n  enabled: true"),
        },
    )
    found = lines(brain, "Human calibration")
    assert found == [
        "[warn] Human calibration: scenario:digest: its partial evaluation.human block drops expiresHours, "
        "agreement.minPairs from the manifest (the block is replaced whole; keys it leaves out come from the engine)"
    ]


def test_a_partial_autonomy_block_names_the_keys_it_drops_from_the_manifest(tmp_path):
    brain = Brain(
        tmp_path,
        {
            MANIFEST: "loop:\n  autonomy: { decide: auto, merge: auto, mergeMethod: squash }\n",
            "features/d/digest.scenario.md": md("loop:\n  autonomy: { decide: auto }"),
        },
    )
    found = lines(brain, "Loop autonomy")
    assert found[0] == (
        "[warn] Loop autonomy: scenario:digest: its partial loop.autonomy block drops merge, mergeMethod from the "
        "manifest (the block is replaced whole; keys it leaves out come from the engine)"
    )


def test_auto_auto_judged_by_quality_alone_warns(tmp_path):
    brain = Brain(
        tmp_path,
        {
            "features/d/digest.scenario.md": md(
                "evaluation:\n  enabled: true\nloop:\n  enabled: true\n  autonomy: { decide: auto, merge: auto }"
            )
        },
    )
    assert any("judged by quality alone" in line for line in lines(brain, "Loop autonomy"))


def test_a_section_that_raises_is_reported_as_a_fail(tmp_path, monkeypatch):
    def broken(ctx):
        raise RuntimeError("boom")
        yield Check("pass", "never")

    monkeypatch.setitem(doctor.SECTIONS, "Broken", broken)
    brain = Brain(tmp_path, {"features/d/digest.scenario.md": SCENARIO})
    assert lines(brain, "Broken") == ["[fail] Broken: the check itself failed: RuntimeError: boom"]
