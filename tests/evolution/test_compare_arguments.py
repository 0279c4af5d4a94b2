"""A loop module's compare is called with the seed's arguments it names (seed 003, "Your own post-merge comparator")."""

from __future__ import annotations

from evolution.loop.verdict import compare_arguments

SEED = {"targetKind": "scenario", "targetId": "shorts", "spec": {}, "before": {"v": 1}, "after": {"v": 2}, "terms": {}}


def test_a_seed_style_compare_of_before_and_after_gets_just_those():
    def compare(before, after):
        return None

    assert compare_arguments(compare, SEED) == ([], {"before": {"v": 1}, "after": {"v": 2}})


def test_a_compare_taking_keywords_gets_every_argument():
    def compare(**kwargs):
        return None

    assert compare_arguments(compare, SEED) == ([], SEED)


def test_a_compare_of_one_record_gets_the_whole_record():
    def compare(ctx):
        return None

    assert compare_arguments(compare, SEED) == ([SEED], {})


def test_a_compare_naming_the_target_and_spec_gets_them():
    def compare(targetKind, targetId, spec, before, after, terms=None):
        return None

    assert compare_arguments(compare, SEED)[1] == SEED
