"""The brain read at one commit from a real git repository: entities, manifest, methods, and what breaks alone."""

from __future__ import annotations

import hashlib

import pytest

from singularity.brain import frontmatter
from singularity.brain.loader import DEFAULT_METHOD_FILE, cron_why, load_brain
from tests.grading.brain_helpers import HEARTBEAT, SCENARIO, Brain, md

MANIFEST = "constitution/MANIFEST.yaml"
METHODS = "constitution/Evaluation/Methods"


@pytest.fixture
def brain(tmp_path):
    return Brain(
        tmp_path,
        {
            MANIFEST: "evaluation:\n  sample: { rate: 0.2, maxPerDay: 20 }  # brain-wide\n",
            "features/digest/digest.scenario.md": SCENARIO,
            "features/ops/pulse.heartbeat.md": HEARTBEAT,
            "features/pricing/pricing.scenario.md": md("name: Pricing\nevaluation:\n  enabled: true"),
            "features/pricing/pricing.pipeline.py": "def run(ctx, input):\n    return {}\n",
            "features/pricing/pricing.loop.py": "def measure(run):\n    return []\n",
            "features/broken/broken.scenario.md": md("name: Broken\ndescription: Use this: it breaks"),
            "features/bad-terms/bad-terms.scenario.md": md("evaluation:\n  sample: { rate: 3 }"),
            "features/chat/plain.agent.md": md("name: Plain role"),
            "features/chat/support.agent.md": md("name: Support\nevaluation:\n  enabled: true"),
        },
    )


def load(brain):
    return load_brain(brain.checkout, brain.checkout.head())


def by_slug(snapshot):
    return {e.slug: e for e in snapshot.entities}


def test_a_broken_entity_stands_next_to_good_ones(brain):
    snapshot = load(brain)
    entities = by_slug(snapshot)
    assert snapshot.errors == []
    assert entities["digest"].ok and entities["pulse"].ok and entities["pricing"].ok
    assert entities["digest"].terms["evaluation"]["sample"] == {"rate": 0.2, "maxPerDay": 20}
    assert entities["broken"].error.startswith("features/broken/broken.scenario.md: line 3: broken YAML")
    assert entities["broken"].terms == {}
    assert entities["bad-terms"].error == (
        "features/bad-terms/bad-terms.scenario.md: evaluation.sample.rate: must be between 0 and 1, not 3"
    )


def test_kinds_come_from_the_file_names(brain):
    entities = by_slug(load(brain))
    assert (entities["digest"].target_kind, entities["digest"].kind) == ("scenario", "workflow")
    assert (entities["pricing"].target_kind, entities["pricing"].kind) == ("scenario", "pipeline")
    assert entities["pricing"].pipeline_path == "features/pricing/pricing.pipeline.py"
    assert (entities["pulse"].target_kind, entities["pulse"].kind) == ("heartbeat", "heartbeat")
    assert entities["pulse"].schedule == "*/5 * * * *"


def test_a_role_is_an_entity_only_when_it_declares_evaluation_or_loop(brain):
    entities = by_slug(load(brain))
    assert "plain" not in entities
    assert (entities["support"].target_kind, entities["support"].kind) == ("role", "role")


def test_the_definition_hash_covers_the_file_and_the_primary_pipeline(brain):
    entities = by_slug(load(brain))
    scenario = (brain.work.path / "features/pricing/pricing.scenario.md").read_bytes()
    pipeline = (brain.work.path / "features/pricing/pricing.pipeline.py").read_bytes()
    assert entities["pricing"].definition_hash == hashlib.sha256(scenario + pipeline).hexdigest()
    digest = (brain.work.path / "features/digest/digest.scenario.md").read_bytes()
    assert entities["digest"].definition_hash == hashlib.sha256(digest).hexdigest()
    brain.commit({"features/pricing/pricing.pipeline.py": "def run(ctx, input):\n    return {'v': 2}\n"})
    brain.checkout.fetch()
    assert by_slug(load(brain))["pricing"].definition_hash != entities["pricing"].definition_hash


def test_the_loop_module_beside_the_file_is_listed_with_its_hash(brain):
    pricing = by_slug(load(brain))["pricing"]
    assert pricing.loop_module_path == "features/pricing/pricing.loop.py"
    source = (brain.work.path / "features/pricing/pricing.loop.py").read_bytes()
    assert pricing.loop_module_hash == hashlib.sha256(source).hexdigest()
    assert by_slug(load(brain))["digest"].loop_module_path == ""


def test_it_reads_the_commit_never_the_working_directory(brain):
    first = brain.checkout.head()
    (brain.checkout.path / "features/digest/digest.scenario.md").write_text(md("name: Edited in place"))
    (brain.checkout.path / "features/new/new.scenario.md").parent.mkdir(parents=True)
    (brain.checkout.path / "features/new/new.scenario.md").write_text(md("name: Never committed"))
    entities = by_slug(load_brain(brain.checkout, first))
    assert entities["digest"].name == "Digest"
    assert "new" not in entities
    brain.commit({"features/digest/digest.scenario.md": md("name: Renamed")})
    brain.checkout.fetch()
    assert by_slug(load(brain))["digest"].name == "Renamed"
    assert by_slug(load_brain(brain.checkout, first))["digest"].name == "Digest"


def test_frontmatter_and_body_are_plain_data(brain):
    digest = by_slug(load(brain))["digest"]
    assert digest.frontmatter == {
        "name": "Digest",
        "description": "Writes the daily digest",
        "evaluation": {"enabled": True},
        "loop": {"enabled": True},
    }
    assert type(digest.frontmatter["evaluation"]) is dict
    assert digest.body == "Do the work.\n"
    assert digest.description == "Writes the daily digest"


@pytest.mark.parametrize(
    ("frontmatter_text", "why"),
    [
        ("name: Tick", "schedule: required"),
        ("schedule: '* * *'", "a cron has 5"),
        ("schedule: '61 * * * *'", "outside 0-59"),
        ("schedule: 5", "5-field cron"),
    ],
)
def test_a_heartbeat_needs_a_valid_schedule(tmp_path, frontmatter_text, why):
    brain = Brain(tmp_path, {"features/t/tick.heartbeat.md": md(frontmatter_text)})
    tick = by_slug(load(brain))["tick"]
    assert tick.error.startswith("features/t/tick.heartbeat.md: schedule: ")
    assert why in tick.error


def test_a_scenarios_tasks_are_id_and_prompt(tmp_path):
    brain = Brain(
        tmp_path,
        {
            "features/a/good.scenario.md": md(
                "tasks:\n  - { id: one, prompt: Do one }\n  - { id: two, prompt: Do two }"
            ),
            "features/a/bad.scenario.md": md("tasks:\n  - { id: one, prompt: Do one }\n  - { id: one }"),
        },
    )
    entities = by_slug(load(brain))
    assert entities["good"].ok
    assert "tasks.1.id: 'one' appears twice" in entities["bad"].error
    assert "tasks.1.prompt: required text" in entities["bad"].error


def test_a_duplicate_id_is_a_brain_wide_error_and_the_first_file_stands(tmp_path):
    brain = Brain(
        tmp_path,
        {"features/a/digest.scenario.md": SCENARIO, "features/b/digest.scenario.md": md("name: Other")},
    )
    snapshot = load(brain)
    assert [e.path for e in snapshot.entities] == ["features/a/digest.scenario.md"]
    assert snapshot.errors == [
        "features/b/digest.scenario.md: scenario id 'digest' is already defined by "
        "features/a/digest.scenario.md; this file is ignored"
    ]


def test_a_manifest_that_does_not_parse_is_a_brain_wide_error_and_no_terms_resolve(tmp_path):
    brain = Brain(tmp_path, {MANIFEST: "evaluation:\n  sample: [\n", "features/d/digest.scenario.md": SCENARIO})
    snapshot = load(brain)
    assert len(snapshot.errors) == 1 and snapshot.errors[0].startswith(f"{MANIFEST}: line ")
    digest = by_slug(snapshot)["digest"]
    assert "MANIFEST.yaml does not load" in digest.error
    assert digest.terms == {}


def test_a_manifest_refusal_fails_the_brains_load(tmp_path):
    brain = Brain(tmp_path, {MANIFEST: "loop:\n  pipeline: my-proposer\n", "features/d/digest.scenario.md": SCENARIO})
    snapshot = load(brain)
    assert snapshot.errors == [
        f"{MANIFEST}: loop.pipeline: no longer sits flat in loop: — it moved to loop.proposer.pipeline"
    ]
    assert not by_slug(snapshot)["digest"].ok


def test_the_default_method_falls_back_to_the_engines_bundled_text(brain):
    method = load(brain).methods["default"]
    raw = DEFAULT_METHOD_FILE.read_bytes()
    assert (method.source, method.error) == ("engine", "")
    assert method.text == raw.decode()
    assert method.sha256 == hashlib.sha256(raw).hexdigest()
    assert "# Run Evaluation" in method.text


def test_brain_method_files_load_with_their_hash_and_break_alone(tmp_path):
    good = md("name: strict\ndescription: 'Strict: no partial credit'", "# Run Evaluation\n\nBe strict.\n")
    brain = Brain(
        tmp_path,
        {
            f"{METHODS}/strict.md": good,
            f"{METHODS}/default.md": md("name: default", "# Run Evaluation\nOurs.\n"),
            f"{METHODS}/headless.md": md("name: headless", "## Run Evaluation\nNo top heading.\n"),
            f"{METHODS}/colon.md": md("name: colon\ndescription: Grades: everything", "# Run Evaluation\n"),
            f"{METHODS}/none.md": md("name: none", "# Run Evaluation\n"),
            "features/d/digest.scenario.md": md("evaluation:\n  enabled: true\n  method: strict"),
        },
    )
    snapshot = load(brain)
    methods = snapshot.methods
    assert methods["strict"].error == "" and methods["strict"].source == "brain"
    assert methods["strict"].frontmatter == {"name": "strict", "description": "Strict: no partial credit"}
    assert methods["strict"].sha256 == hashlib.sha256(good.encode()).hexdigest()
    assert methods["default"].source == "engine-customised"
    assert (
        methods["headless"].error == f"{METHODS}/headless.md: a method file must contain the heading '# Run Evaluation'"
    )
    assert methods["colon"].error.startswith(f"{METHODS}/colon.md: line 3: broken YAML")
    assert "reserved" in methods["none"].error
    assert snapshot.errors == []
    assert by_slug(snapshot)["digest"].ok


def test_frontmatter_errors_name_the_file_and_the_line():
    with pytest.raises(frontmatter.FrontmatterError) as caught:
        frontmatter.parse("---\nname: x\nname: y\n---\nbody", path="a.md")
    assert str(caught.value).startswith("a.md: line 3: broken YAML")
    with pytest.raises(frontmatter.FrontmatterError, match="never closed"):
        frontmatter.parse("---\nname: x\n", path="a.md")
    assert frontmatter.parse("no frontmatter here", path="a.md") == ({}, "no frontmatter here")


def test_anchored_booleans_and_numbers_come_out_plain():
    data, _ = frontmatter.parse("---\na: &on true\nb: *on\nc: 0.5\nd: 2026-01-02\n1: one\n---\n", path="a.md")
    assert data == {"a": True, "b": True, "c": 0.5, "d": "2026-01-02", "1": "one"}
    assert all(type(v) in (bool, float, str) for v in data.values())


@pytest.mark.parametrize(
    ("expression", "ok"),
    [
        ("0 3 * * *", True),
        ("*/15 9-17 * * mon-fri", True),
        ("0 0 1,15 jan,jul 0", True),
        ("0 0 * *", False),
        ("0 24 * * *", False),
        ("*/0 * * * *", False),
        ("5-1 * * * *", False),
        ("0 0 0 * *", False),
    ],
)
def test_cron_expressions(expression, ok):
    assert (cron_why(expression) is None) is ok
