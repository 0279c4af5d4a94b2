"""A hostile brain: alias bombs, oversized and deeply nested YAML, symlinked files — each breaks its own file only."""

from __future__ import annotations

import os
import time

import pytest

from grading.models import Entity
from grading.sync import sync_brain
from singularity.brain import frontmatter
from singularity.brain.loader import load_brain
from tests.grading.brain_helpers import HEARTBEAT, SCENARIO, Brain, md

MANIFEST = "constitution/MANIFEST.yaml"
BOMB_PATH = "features/bomb/bomb.scenario.md"

#: "Billion laughs" in a few hundred bytes: nine levels of nine aliases, 9**9 strings once expanded.
BOMB = """---
a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
---
Boom.
"""


def load(brain):
    """The snapshot of the origin's newest commit, as the engine's checkout fetches it."""
    return load_brain(brain.checkout, brain.checkout.fetch())


def by_slug(snapshot):
    return {e.slug: e for e in snapshot.entities}


@pytest.fixture
def brain(tmp_path):
    return Brain(
        tmp_path,
        {
            MANIFEST: "evaluation:\n  sample: { rate: 1 }\n",
            "features/digest/digest.scenario.md": SCENARIO,
            "features/ops/pulse.heartbeat.md": HEARTBEAT,
        },
    )


def test_an_alias_bomb_is_its_entitys_load_error_and_the_others_load(brain):
    brain.commit({BOMB_PATH: BOMB})
    started = time.monotonic()
    entities = by_slug(load(brain))
    assert time.monotonic() - started < 5
    assert entities["bomb"].error.startswith(f"{BOMB_PATH}: ")
    assert "aliases" in entities["bomb"].error and str(frontmatter.MAX_ALIASES) in entities["bomb"].error
    assert entities["digest"].ok and entities["pulse"].ok


@pytest.mark.django_db
def test_the_sync_writes_the_bomb_as_a_broken_row_beside_the_good_ones(brain):
    brain.commit({BOMB_PATH: BOMB})
    report = sync_brain(checkout=brain.checkout)
    assert [line.label for line in report.entities if not line.ok] == ["scenario:bomb"]
    bomb = Entity.objects.get(slug="bomb")
    assert bomb.load_error.startswith(BOMB_PATH) and bomb.frontmatter == {} and not bomb.evaluation_enabled
    assert Entity.objects.get(slug="digest").ok


def test_a_few_aliases_expanding_to_many_values_are_refused_by_the_value_bound(brain):
    # Five levels of eight aliases: 40 aliases, under the alias bound, but 8**5 values once expanded.
    levels = "abcdef"
    lines = [
        f"{name}: &{name} [" + ",".join([f"*{levels[i - 1]}"] * 8 if i else ["1"] * 8) + "]"
        for i, name in enumerate(levels)
    ]
    brain.commit({BOMB_PATH: md("\n".join(lines))})
    error = by_slug(load(brain))["bomb"].error
    assert error.startswith(f"{BOMB_PATH}: ") and str(frontmatter.MAX_VALUES) in error


def test_ordinary_anchors_still_load(brain):
    text = md("name: Anchored\nbase: &base { enabled: true }\nevaluation: *base\nloop: *base")
    brain.commit({"features/anchored/anchored.scenario.md": text})
    anchored = by_slug(load(brain))["anchored"]
    assert anchored.ok, anchored.error
    assert anchored.frontmatter["loop"] == {"enabled": True}


def test_a_file_over_the_size_bound_is_refused_naming_the_bound(brain):
    big = md("name: Big\ndescription: " + "x" * frontmatter.MAX_FILE_BYTES)
    brain.commit({"features/big/big.scenario.md": big})
    entities = by_slug(load(brain))
    assert entities["big"].error == (
        f"features/big/big.scenario.md: {len(big.encode())} bytes is over the "
        f"{frontmatter.MAX_FILE_BYTES}-byte bound on a brain file; it is not read"
    )
    assert entities["digest"].ok


@pytest.mark.parametrize("depth", [frontmatter.MAX_DEPTH + 1, 50_000])
def test_frontmatter_nested_past_the_depth_bound_is_refused(brain, depth):
    brain.commit({"features/deep/deep.scenario.md": md("name: Deep\nnested: " + "[" * depth + "]" * depth)})
    entities = by_slug(load(brain))
    error = entities["deep"].error
    assert error.startswith("features/deep/deep.scenario.md: ")
    assert f"nested more than {frontmatter.MAX_DEPTH} levels" in error
    assert entities["digest"].ok


def test_an_anchor_that_contains_itself_does_not_recurse(brain):
    brain.commit({"features/loop/loop.scenario.md": md("name: Loop\nself: &self [*self]")})
    looped = by_slug(load(brain))["loop"]
    assert looped.ok and looped.frontmatter["self"] == [None]


def test_a_symlinked_entity_file_is_refused_naming_it(brain):
    target = brain.work.path / "features/digest/digest.scenario.md"
    link = brain.work.path / "features/linked/linked.scenario.md"
    link.parent.mkdir(parents=True)
    os.symlink(os.path.relpath(target, link.parent), link)
    brain.commit({})
    entities = by_slug(load(brain))
    assert entities["linked"].error == (
        "features/linked/linked.scenario.md: a symlink; a brain file must be a regular file, it is not read"
    )
    assert entities["digest"].ok


def test_a_symlinked_pipeline_is_its_entitys_load_error(brain):
    folder = brain.work.path / "features/digest"
    os.symlink("/etc/passwd", folder / "digest.pipeline.py")
    brain.commit({})
    digest = by_slug(load(brain))["digest"]
    assert digest.error == (
        "features/digest/digest.pipeline.py: a symlink; a brain file must be a regular file, it is not read"
    )


def test_a_manifest_bomb_is_a_brain_wide_error(brain):
    brain.commit({MANIFEST: BOMB.split("---\n")[1]})
    snapshot = load(brain)
    assert len(snapshot.errors) == 1 and snapshot.errors[0].startswith(f"{MANIFEST}: ")
    assert "does not load" in by_slug(snapshot)["digest"].error


def test_parse_yaml_names_each_bound():
    with pytest.raises(frontmatter.FrontmatterError, match=r"^x.yaml: line 2: .*more than \d+ aliases"):
        frontmatter.parse_yaml(
            "a: &a [1]\nb: [" + ",".join(["*a"] * (frontmatter.MAX_ALIASES + 1)) + "]", path="x.yaml"
        )
    with pytest.raises(frontmatter.FrontmatterError, match=r"^x.yaml: .*bytes is over the"):
        frontmatter.parse_yaml("a: " + "x" * frontmatter.MAX_FILE_BYTES, path="x.yaml")
    with pytest.raises(frontmatter.FrontmatterError, match=r"^x.yaml: .*mapping key"):
        frontmatter.parse_yaml("? [1, 2]\n: v\n", path="x.yaml")
