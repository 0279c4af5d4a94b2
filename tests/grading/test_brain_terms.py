"""Terms across the three tiers: every merge rule with the seed's own examples, every load-time refusal."""

from __future__ import annotations

import re
from typing import Any

import pytest

from singularity.brain import defaults as D
from singularity.brain.terms import TermsError, check_manifest, metric_band, resolve_terms

LABEL = "features/digest/digest.scenario.md"


def resolve(manifest: dict[str, Any] | None = None, entity: dict[str, Any] | None = None, kind: str = "workflow"):
    return resolve_terms(kind, manifest or {}, entity or {}, entity_label=LABEL)


def refusal(manifest: dict[str, Any] | None = None, entity: dict[str, Any] | None = None) -> str:
    with pytest.raises(TermsError) as caught:
        resolve(manifest, entity)
    return str(caught.value)


# ---------------------------------------------------------------------------
# Merge rules.


def test_sample_merges_field_by_field_so_the_entity_keeps_the_brains_ceiling():
    terms, prov = resolve(
        {"evaluation": {"sample": {"rate": 0.2, "maxPerDay": 20}}}, {"evaluation": {"sample": {"rate": 1}}}
    )
    assert terms["evaluation"]["sample"] == {"rate": 1, "maxPerDay": 20}
    assert prov["evaluation.sample.rate"] == "entity"
    assert prov["evaluation.sample.maxPerDay"] == "manifest"


def test_metric_tolerance_merges_field_by_field():
    terms, prov = resolve(
        {"evaluation": {"metricTolerance": {"judged": 0}}}, {"evaluation": {"metricTolerance": {"computedPct": 0.2}}}
    )
    assert terms["evaluation"]["metricTolerance"] == {"judged": 0, "computedPct": 0.2}
    assert prov["evaluation.metricTolerance.judged"] == "manifest"


def test_a_trigger_the_entity_writes_fills_its_missing_keys_from_the_engine_not_the_manifest():
    terms, prov = resolve(
        {"loop": {"trigger": {"windowRuns": 5, "minFailures": 3}}}, {"loop": {"trigger": {"windowRuns": 10}}}
    )
    assert terms["loop"]["trigger"] == {"windowRuns": 10, "minFailures": 2, "every": None}
    assert prov["loop.trigger.windowRuns"] == "entity"
    assert prov["loop.trigger.minFailures"] == "engine"


def test_an_entity_silent_on_a_loop_block_takes_the_manifests_whole():
    terms, prov = resolve({"loop": {"trigger": {"windowRuns": 5, "minFailures": 3}}}, {})
    assert terms["loop"]["trigger"]["minFailures"] == 3
    assert prov["loop.trigger.minFailures"] == "manifest"
    assert prov["loop.trigger.every"] == "engine"


NON_DEFAULT = {
    "trigger": {"windowRuns": 7, "minFailures": 3, "every": 24},
    "check": {"mode": "replay", "inputs": 3, "trials": 2, "deadlineHours": 12, "incumbent": "replay"},
    "watch": {
        "mode": "none",
        "windowRuns": 4,
        "minFailures": 1,
        "deadlineHours": 100,
        "confidence": 0.95,
        "onInconclusive": "revert",
    },
    "autonomy": {
        "decide": "auto",
        "merge": "auto",
        "mergeMethod": "squash",
        "maxConsecutiveRegressions": 4,
        "onInconclusive": "ship",
        "onUnmeasured": "continue",
        "requireCalibration": True,
    },
    "budget": {"maxUsdPerRun": "5", "maxUsdPerMonth": "50"},
    "evidence": {"runs": 3, "maxTokens": 1000, "includeTrace": True},
    "lessons": {"maxRecalled": 2, "retentionDays": 30},
}


@pytest.mark.parametrize("block", D.LOOP_WHOLESALE)
def test_every_loop_block_is_replaced_wholesale_with_the_engine_filling_the_rest(block):
    """An entity's block replaces the manifest's whole: every key it leaves out is the engine's, not the manifest's
    (a manifest-only leaf, ``loop.budget.maxUsdPerMonth``, stays the manifest's). Tried with the block empty and
    with its first key alone, so a block of one entity key (budget) is read too."""
    from singularity.brain.terms import MANIFEST_ONLY_LEAVES

    manifest_block = NON_DEFAULT[block]
    assert all(value != D.LOOP[block][key] for key, value in manifest_block.items())  # else the test reads nothing
    first_key = next(iter(manifest_block))
    for entity_block in ({}, {first_key: manifest_block[first_key]}):
        terms, prov = resolve({"loop": {block: manifest_block}}, {"loop": {block: entity_block}})
        for key, engine_value in D.LOOP[block].items():
            if key in entity_block:
                assert prov[f"loop.{block}.{key}"] == "entity"
            elif ("loop", block, key) in MANIFEST_ONLY_LEAVES:
                assert terms["loop"][block][key] == manifest_block[key], key
                assert prov[f"loop.{block}.{key}"] == "manifest"
            else:
                assert terms["loop"][block][key] == engine_value, (entity_block, key)
                assert prov[f"loop.{block}.{key}"] == "engine"


def test_a_partial_autonomy_block_drops_the_manifests_other_gate():
    terms, _ = resolve(
        {"loop": {"autonomy": {"decide": "auto", "merge": "auto"}}}, {"loop": {"autonomy": {"decide": "auto"}}}
    )
    assert terms["loop"]["autonomy"]["merge"] == "human"


def test_the_human_block_is_replaced_whole_so_expires_hours_falls_back_to_the_engines_48():
    terms, prov = resolve({"evaluation": {"human": {"expiresHours": 12}}}, {"evaluation": {"human": {"ask": "always"}}})
    assert terms["evaluation"]["human"]["ask"] == "always"
    assert terms["evaluation"]["human"]["expiresHours"] == 48
    assert prov["evaluation.human.expiresHours"] == "engine"
    assert prov["evaluation.human.agreement.minPairs"] == "engine"


def test_human_defaults_are_the_seeds():
    terms, _ = resolve()
    assert terms["evaluation"]["human"] == {
        "ask": "never",
        "spotCheck": 0.1,
        "expiresHours": 48,
        "agreement": {"minPairs": 5, "tolerance": 0.25, "threshold": 0.8, "maxPairs": 20},
    }


def test_score_weights_belong_whole_to_the_nearest_tier():
    terms, prov = resolve({"evaluation": {"scoreWeights": {"tasks": 1, "run": 3}}}, {})
    assert terms["evaluation"]["scoreWeights"] == {"tasks": 1, "run": 3}
    assert prov["evaluation.scoreWeights.run"] == "manifest"
    terms, _ = resolve(
        {"evaluation": {"scoreWeights": {"tasks": 1, "run": 3}}},
        {"evaluation": {"scoreWeights": {"tasks": 2, "run": 2}}},
    )
    assert terms["evaluation"]["scoreWeights"] == {"tasks": 2, "run": 2}


def test_grade_after_hours_zero_on_the_entity_beats_the_manifests_72():
    terms, prov = resolve({"evaluation": {"gradeAfterHours": 72}}, {"evaluation": {"gradeAfterHours": 0}})
    assert terms["evaluation"]["gradeAfterHours"] == 0
    assert prov["evaluation.gradeAfterHours"] == "entity"
    terms, _ = resolve({"evaluation": {"gradeAfterHours": 72}}, {})
    assert terms["evaluation"]["gradeAfterHours"] == 72


def test_context_and_chat_episode_keys_are_nearest_tier_wins_per_key_zero_included():
    terms, prov = resolve(
        {"evaluation": {"context": {"priorEpisodes": 2, "maxTokens": 1000}}, "chat": {"episode": {"idleHours": 4}}},
        {"evaluation": {"context": {"priorEpisodes": 0}}, "chat": {"episode": {"idleHours": 0.5}}},
        kind="role",
    )
    assert terms["evaluation"]["context"] == {"priorEpisodes": 0, "maxTokens": 1000}
    assert terms["chat"]["episode"]["idleHours"] == 0.5
    assert prov["evaluation.context.maxTokens"] == "manifest"
    assert terms["chat"]["onRoleChange"] == "keep"


def test_the_nearest_tier_wins_for_plain_keys():
    terms, prov = resolve({"loop": {"threshold": 0.8}}, {"loop": {"threshold": 0.5}})
    assert terms["loop"]["threshold"] == 0.5
    terms, prov = resolve({"loop": {"threshold": 0.8}}, {})
    assert terms["loop"]["threshold"] == 0.8
    assert prov["loop.threshold"] == "manifest"


def test_the_proposer_block_folds_per_field_and_keeps_both_tiers_instructions():
    terms, prov = resolve(
        {"loop": {"proposer": {"pipeline": "freelancer-proposer", "instructions": ["Plain voice."]}}},
        {"loop": {"proposer": {"modelRef": "smart", "instructions": ["Refunds first."]}}},
    )
    assert terms["loop"]["proposer"] == {
        "pipeline": "freelancer-proposer",
        "modelRef": "smart",
        "instructions": {"brain": ["Plain voice."], "entity": ["Refunds first."]},
    }
    assert prov["loop.proposer.pipeline"] == "manifest"
    assert prov["loop.proposer.modelRef"] == "entity"


def test_an_entity_proposer_pipeline_null_takes_the_proposer_agent_back():
    terms, _ = resolve({"loop": {"proposer": {"pipeline": "x"}}}, {"loop": {"proposer": {"pipeline": None}}})
    assert terms["loop"]["proposer"]["pipeline"] is None


def test_protected_paths_add_up_across_tiers():
    terms, _ = resolve({"loop": {"protectedPaths": ["integrations/"]}}, {"loop": {"protectedPaths": ["db.py"]}})
    assert terms["loop"]["protectedPaths"] == ["integrations/", "db.py"]


def test_lock_groups_come_from_the_manifest_with_engine_terms_and_membership_is_nearest_list():
    manifest = {"loop": {"groups": {"audience": {"repair": "wait"}, "ops_2": None}, "group": ["audience"]}}
    terms, prov = resolve(manifest, {})
    assert terms["loop"]["groups"] == {
        "audience": {"lock": True, "repair": "wait"},
        "ops_2": {"lock": True, "repair": "bypass"},
    }
    assert terms["loop"]["group"] == ["audience"]
    terms, prov = resolve(manifest, {"loop": {"group": []}})
    assert terms["loop"]["group"] == []
    assert prov["loop.group"] == "entity"


def test_the_judge_block_is_read_from_the_manifest():
    terms, prov = resolve({"evaluation": {"judge": {"maxUngradedShare": 0.5}}}, {})
    assert terms["evaluation"]["judge"] == {"maxUngradedShare": 0.5}
    assert prov["evaluation.judge.maxUngradedShare"] == "manifest"


def test_max_usd_per_run_is_a_decimal_string():
    terms, _ = resolve({}, {"loop": {"budget": {"maxUsdPerRun": 0.1}}})
    assert terms["loop"]["budget"]["maxUsdPerRun"] == "0.1"


# ---------------------------------------------------------------------------
# The kill switch.


@pytest.mark.parametrize("half", ["evaluation", "loop"])
def test_enabled_false_in_the_manifest_holds_for_every_entity(half):
    terms, prov = resolve({half: {"enabled": False}}, {half: {"enabled": True}})
    assert terms[half]["enabled"] is False
    assert prov[f"{half}.enabled"] == "manifest"


@pytest.mark.parametrize("half", ["evaluation", "loop"])
def test_the_manifest_can_never_switch_an_entity_on(half):
    terms, prov = resolve({half: {"enabled": True}}, {})
    assert terms[half]["enabled"] is False
    assert prov[f"{half}.enabled"] == "engine"


@pytest.mark.parametrize("half", ["evaluation", "loop"])
def test_an_entity_switches_itself_on(half):
    terms, prov = resolve({half: {"enabled": True}}, {half: {"enabled": True}})
    assert terms[half]["enabled"] is True
    assert prov[f"{half}.enabled"] == "entity"
    terms, _ = resolve({}, {half: {"enabled": True}})
    assert terms[half]["enabled"] is True


# ---------------------------------------------------------------------------
# Metrics.


def test_with_nothing_declared_the_spec_is_full_quality_objective_and_the_catalog_observed():
    terms, _ = resolve()
    metrics = terms["evaluation"]["metrics"]
    assert list(metrics) == ["quality", "cost_usd", "duration_ms", "tool_failures"]
    assert metrics["quality"]["role"] == "objective"
    assert {metrics[m]["role"] for m in ("cost_usd", "duration_ms", "tool_failures")} == {"observe"}
    fields = {"kind", "direction", "unit", "role", "scope", "target", "floor", "tolerance", "tolerancePct"}
    fields |= {"mustImprove", "critical", "aggregate", "optional", "scale", "human", "criterion", "catalog"}
    for spec in metrics.values():
        assert set(spec) == fields
        assert spec["catalog"] is True
        assert spec["aggregate"] == "median"
        assert spec["scale"] is None


def test_an_objective_other_than_quality_makes_quality_a_guard():
    terms, prov = resolve({}, {"evaluation": {"metrics": {"cost_usd": {"role": "objective", "target": 0.25}}}})
    assert terms["evaluation"]["metrics"]["quality"]["role"] == "guard"
    assert terms["evaluation"]["metrics"]["cost_usd"]["target"] == 0.25
    assert prov["evaluation.metrics.cost_usd.role"] == "entity"


def test_quality_observe_written_explicitly_opts_out_of_the_guard():
    terms, _ = resolve(
        {}, {"evaluation": {"metrics": {"cost_usd": {"role": "objective"}, "quality": {"role": "observe"}}}}
    )
    assert terms["evaluation"]["metrics"]["quality"]["role"] == "observe"


def test_an_entity_promotes_a_brain_wide_guard_without_redeclaring_it():
    terms, prov = resolve(
        {"evaluation": {"metrics": {"cost_usd": {"role": "guard"}}}},
        {"evaluation": {"metrics": {"cost_usd": {"role": "objective"}}}},
    )
    cost = terms["evaluation"]["metrics"]["cost_usd"]
    assert cost["role"] == "objective"
    assert cost["kind"] == "computed" and cost["catalog"] is True
    assert prov["evaluation.metrics.cost_usd.kind"] == "engine"


def test_a_metric_introduced_by_the_manifest_is_tuned_by_the_entity():
    manifest = {
        "evaluation": {"metrics": {"relevance": {"kind": "judged", "direction": "max", "criterion": "On topic"}}}
    }
    terms, prov = resolve(manifest, {"evaluation": {"metrics": {"relevance": {"role": "guard", "kind": "judged"}}}})
    relevance = terms["evaluation"]["metrics"]["relevance"]
    assert (relevance["kind"], relevance["role"], relevance["catalog"]) == ("judged", "guard", False)
    assert prov["evaluation.metrics.relevance.kind"] == "manifest"
    assert prov["evaluation.metrics.relevance.role"] == "entity"


def test_under_method_none_quality_is_absent_and_no_guard_is_added():
    terms, _ = resolve(
        {},
        {
            "evaluation": {
                "method": "none",
                "metrics": {"replied": {"kind": "computed", "direction": "max", "role": "objective"}},
            }
        },
    )
    assert terms["evaluation"]["metrics"]["quality"]["role"] == "observe"


def test_a_human_rated_judged_metric_gets_the_engines_rubric_and_a_judge_only_one_stays_on_0_1():
    terms, _ = resolve(
        {},
        {
            "evaluation": {
                "metrics": {
                    "fit": {"kind": "judged", "human": True, "direction": "max", "role": "guard"},
                    "relevance": {"kind": "judged", "direction": "max", "role": "guard"},
                    "helpful": {"kind": "reported", "direction": "max", "role": "observe", "criterion": "Solved it"},
                }
            }
        },
    )
    metrics = terms["evaluation"]["metrics"]
    assert metrics["fit"]["scale"] == D.DEFAULT_HUMAN_SCALE
    assert metrics["relevance"]["scale"] is None
    assert metrics["helpful"]["human"] is True
    assert metrics["helpful"]["scale"] == D.DEFAULT_HUMAN_SCALE


def test_a_scale_with_a_band_label_is_accepted():
    scale = {"min": 0, "max": 10, "step": 1, "labels": {"0": "bad", "2..4": "ok", "10": "great"}}
    terms, _ = resolve(
        {},
        {
            "evaluation": {
                "metrics": {
                    "fit": {"kind": "judged", "human": True, "direction": "max", "role": "guard", "scale": scale}
                }
            }
        },
    )
    assert terms["evaluation"]["metrics"]["fit"]["scale"] == scale


def test_metric_band_a_metric_naming_one_axis_owns_both():
    terms, _ = resolve({}, {"evaluation": {"metrics": {"cost_usd": {"tolerance": 0.01}}}})
    evaluation = terms["evaluation"]
    assert metric_band(evaluation["metrics"]["cost_usd"], evaluation) == (0.01, None)
    assert metric_band(evaluation["metrics"]["duration_ms"], evaluation) == (None, 0.1)
    assert metric_band(evaluation["metrics"]["quality"], evaluation) == (0.05, None)


# ---------------------------------------------------------------------------
# Provenance.


def leaves(value: Any, prefix: str) -> list[str]:
    if prefix in ("loop.groups",) or re.match(r"^evaluation\.metrics\.[^.]+\.[^.]+$", prefix):
        return [prefix]
    if isinstance(value, dict) and (value or prefix == "evaluation.metrics"):
        return [leaf for key, sub in value.items() for leaf in leaves(sub, f"{prefix}.{key}")]
    return [prefix]


def test_provenance_names_a_tier_for_every_leaf_key():
    terms, prov = resolve(
        {"evaluation": {"sample": {"maxPerDay": 5}}},
        {"evaluation": {"enabled": True, "metrics": {"cost_usd": {"role": "guard"}}}},
    )
    expected = {leaf for block in terms for leaf in leaves(terms[block], block)}
    assert set(prov) == expected
    assert set(prov.values()) == {"engine", "manifest", "entity"}


# ---------------------------------------------------------------------------
# Refusals: each names the entity, the dotted key and why.

MESSAGE = re.compile(rf"^{re.escape(LABEL)}: [\w.]+(\.[\w.-]+)*: .+")


@pytest.mark.parametrize(
    ("entity", "key", "why"),
    [
        (
            {"evaluation": {"metrics": {"x": {"direction": "max", "role": "guard"}}}},
            "evaluation.metrics.x.kind",
            "required",
        ),
        (
            {"evaluation": {"metrics": {"x": {"kind": "computed", "role": "guard"}}}},
            "evaluation.metrics.x.direction",
            "required",
        ),
        (
            {"evaluation": {"metrics": {"x": {"kind": "computed", "direction": "max"}}}},
            "evaluation.metrics.x.role",
            "required",
        ),
        ({"loop": {"trigger": {"windowRuns": 3, "minFailures": 4}}}, "loop.trigger.minFailures", "above windowRuns"),
        ({"loop": {"watch": {"windowRuns": 2, "minFailures": 3}}}, "loop.watch.minFailures", "above"),
        ({"evaluation": {"scoreWeights": {"tasks": 1}}}, "evaluation.scoreWeights", "declare the pair"),
        ({"evaluation": {"scoreWeights": {"run": 1}}}, "evaluation.scoreWeights", "declare the pair"),
        (
            {
                "evaluation": {
                    "metrics": {
                        "h": {
                            "kind": "reported",
                            "direction": "max",
                            "role": "guard",
                            "criterion": "c",
                            "critical": True,
                        }
                    }
                }
            },
            "evaluation.metrics.h.critical",
            "critical",
        ),
        (
            {
                "evaluation": {
                    "metrics": {
                        "h": {
                            "kind": "reported",
                            "direction": "max",
                            "role": "guard",
                            "criterion": "c",
                            "optional": True,
                        }
                    }
                }
            },
            "evaluation.metrics.h.optional",
            "optional",
        ),
        (
            {
                "evaluation": {
                    "metrics": {
                        "h": {
                            "kind": "reported",
                            "direction": "max",
                            "role": "guard",
                            "criterion": "c",
                            "scope": "period",
                        }
                    }
                }
            },
            "evaluation.metrics.h.scope",
            "period implies kind: computed",
        ),
        (
            {"evaluation": {"metrics": {"h": {"kind": "reported", "direction": "max", "role": "guard"}}}},
            "evaluation.metrics.h.criterion",
            "needs a criterion",
        ),
        (
            {
                "evaluation": {
                    "metrics": {"p": {"kind": "judged", "direction": "max", "role": "guard", "scope": "period"}}
                }
            },
            "evaluation.metrics.p.scope",
            "period implies kind: computed",
        ),
        (
            {
                "evaluation": {
                    "metrics": {
                        "p": {
                            "kind": "computed",
                            "direction": "max",
                            "role": "guard",
                            "scope": "period",
                            "critical": True,
                        }
                    }
                }
            },
            "evaluation.metrics.p.critical",
            "cannot be critical",
        ),
        (
            {
                "evaluation": {
                    "method": "none",
                    "metrics": {"j": {"kind": "judged", "direction": "max", "role": "guard"}},
                }
            },
            "evaluation.metrics.j.kind",
            "method: none",
        ),
        (
            {"evaluation": {"method": "none", "metrics": {"quality": {"role": "objective"}}}},
            "evaluation.metrics.quality.role",
            "method: none",
        ),
        (
            {"evaluation": {"method": "none", "metrics": {"quality": {"role": "guard"}}}},
            "evaluation.metrics.quality.role",
            "method: none",
        ),
        (
            {"evaluation": {"method": "none", "requirements": ["Names every task"]}},
            "evaluation.requirements",
            "method: none",
        ),
        (
            {"evaluation": {"metrics": {"quality": {"human": True}}}},
            "evaluation.metrics.quality.human",
            "judge's alone",
        ),
        (
            {"evaluation": {"metrics": {"quality": {"scale": {"min": 1, "max": 5}}}}},
            "evaluation.metrics.quality.scale",
            "judge's alone",
        ),
        (
            {
                "evaluation": {
                    "metrics": {
                        "c": {"kind": "computed", "direction": "max", "role": "guard", "scale": {"min": 1, "max": 5}}
                    }
                }
            },
            "evaluation.metrics.c.scale",
            "computed",
        ),
        (
            {
                "evaluation": {
                    "metrics": {"c": {"kind": "computed", "direction": "max", "role": "guard", "human": True}}
                }
            },
            "evaluation.metrics.c.human",
            "computed",
        ),
        (
            {"evaluation": {"metrics": {"cost_usd": {"scale": {"min": 0, "max": 1}}}}},
            "evaluation.metrics.cost_usd.scale",
            "computed",
        ),
        ({"loop": {"preset": "evolve", "threshold": 0.8}}, "loop.threshold", "preset: evolve"),
        (
            {"loop": {"preset": "evolve", "trigger": {"windowRuns": 10, "minFailures": 1}}},
            "loop.trigger.minFailures",
            "preset: evolve",
        ),
        ({"evaluation": {"sample": {"rate": 1.5}}}, "evaluation.sample.rate", "between 0 and 1"),
        ({"evaluation": {"sample": {"rate": -0.1}}}, "evaluation.sample.rate", "negative"),
        ({"evaluation": {"sample": {"rate": True}}}, "evaluation.sample.rate", "number"),
        ({"evaluation": {"sample": {"maxPerDay": -1}}}, "evaluation.sample.maxPerDay", "negative"),
        ({"evaluation": {"gradeAfterHours": -2}}, "evaluation.gradeAfterHours", "negative"),
        ({"loop": {"maxChangedLines": -1}}, "loop.maxChangedLines", "negative"),
        ({"loop": {"budget": {"maxUsdPerRun": -1}}}, "loop.budget.maxUsdPerRun", "negative"),
        ({"evaluation": {"sampel": {"rate": 1}}}, "evaluation.sampel", "did you mean 'sample'"),
        ({"loop": {"trigger": {"windowruns": 5}}}, "loop.trigger.windowruns", "unknown key"),
        ({"evaluation": {"metrics": {"cost_usd": {"rol": "guard"}}}}, "evaluation.metrics.cost_usd.rol", "unknown key"),
        ({"loop": {"modelRef": "smart"}}, "loop.modelRef", "loop.proposer.modelRef"),
        ({"loop": {"preset": "grow"}}, "loop.preset", "repair | evolve"),
        ({"evaluation": {"human": {"ask": "sometimes"}}}, "evaluation.human.ask", "never | always | until-calibrated"),
        ({"loop": {"autonomy": {"onInconclusive": "maybe"}}}, "loop.autonomy.onInconclusive", "human | ship | close"),
        ({"loop": {"watch": {"onInconclusive": "maybe"}}}, "loop.watch.onInconclusive", "keep | revert"),
        ({"loop": {"autonomy": {"mergeMethod": "fast"}}}, "loop.autonomy.mergeMethod", "squash | rebase | merge"),
        ({"loop": {"check": {"trials": 4}}}, "loop.check.trials", "between 1 and 3"),
        ({"evaluation": {"judge": {"maxUngradedShare": 0.9}}}, "evaluation.judge", "brain-wide only"),
        ({"loop": {"groups": {"audience": {"lock": True}}}}, "loop.groups", "brain-wide only"),
        (
            {"evaluation": {"metrics": {"cost_usd": {"kind": "judged"}}}},
            "evaluation.metrics.cost_usd.kind",
            "cannot be redefined",
        ),
        (
            {"evaluation": {"metrics": {"quality": {"direction": "min"}}}},
            "evaluation.metrics.quality.direction",
            "cannot be redefined",
        ),
        (
            {
                "evaluation": {
                    "metrics": {
                        "fit": {
                            "kind": "judged",
                            "human": True,
                            "direction": "max",
                            "role": "guard",
                            "scale": {"min": 1, "max": 5, "labels": {"2-4": "ok"}},
                        }
                    }
                }
            },
            "evaluation.metrics.fit.scale",
            "band",
        ),
    ],
)
def test_a_refusal_names_the_entity_the_key_and_why(entity, key, why):
    message = refusal({}, entity)
    assert f"{LABEL}: {key}: " in message
    assert why in message
    assert all(MESSAGE.match(line) for line in message.splitlines()), message


def test_a_lower_tier_cannot_redefine_an_identity_field_the_manifest_introduced():
    manifest = {"evaluation": {"metrics": {"relevance": {"kind": "judged", "direction": "max"}}}}
    message = refusal(manifest, {"evaluation": {"metrics": {"relevance": {"kind": "computed", "role": "guard"}}}})
    assert f"{LABEL}: evaluation.metrics.relevance.kind: identity field" in message
    message = refusal(manifest, {"evaluation": {"metrics": {"relevance": {"scope": "period", "role": "guard"}}}})
    assert "evaluation.metrics.relevance.scope" in message


def test_every_refusal_is_reported_at_once():
    message = refusal({}, {"evaluation": {"sample": {"rate": 2}, "gradeAfterHours": -1}, "loop": {"preset": "grow"}})
    assert len(message.splitlines()) == 3


def test_a_brain_wide_minfailures_beside_repair_is_simply_not_read_by_an_evolve_entity():
    terms, _ = resolve(
        {"loop": {"preset": "repair", "threshold": 0.8, "trigger": {"windowRuns": 5, "minFailures": 2}}},
        {"loop": {"preset": "evolve", "trigger": {"windowRuns": 10}}},
    )
    assert terms["loop"]["preset"] == "evolve"


def test_an_evolve_entity_may_not_write_minfailures_beside_a_brain_wide_evolve_either():
    message = refusal({"loop": {"preset": "evolve"}}, {"loop": {"trigger": {"windowRuns": 10, "minFailures": 2}}})
    assert f"{LABEL}: loop.trigger.minFailures:" in message


# ---------------------------------------------------------------------------
# The manifest on its own.


@pytest.mark.parametrize(
    ("manifest", "key"),
    [
        ({"loop": {"preset": "evolve", "threshold": 0.8}}, "loop.threshold"),
        ({"loop": {"preset": "evolve", "trigger": {"minFailures": 1}}}, "loop.trigger.minFailures"),
        ({"loop": {"groups": {"Audience": {"lock": True}}}}, "loop.groups.Audience"),
        ({"loop": {"groups": {"audience": {"repair": "later"}}}}, "loop.groups.audience.repair"),
        ({"loop": {"instructions": ["x"]}}, "loop.instructions"),
        ({"loop": {"trigger": {"windowRuns": 2, "minFailures": 3}}}, "loop.trigger.minFailures"),
        ({"evaluation": {"metrics": {"x": {"role": "guard"}}}}, "evaluation.metrics.x.kind"),
    ],
)
def test_manifest_refusals_are_brain_wide(manifest, key):
    lines = check_manifest(manifest)
    assert any(line.startswith(f"constitution/MANIFEST.yaml: {key}: ") for line in lines), lines
    message = refusal(manifest, {})
    assert message.startswith("constitution/MANIFEST.yaml: ")


def test_a_manifest_may_leave_a_metrics_role_to_the_entities():
    manifest = {"evaluation": {"metrics": {"relevance": {"kind": "judged", "direction": "max"}}}}
    assert check_manifest(manifest) == []
    terms, _ = resolve(manifest, {"evaluation": {"metrics": {"relevance": {"role": "observe"}}}})
    assert terms["evaluation"]["metrics"]["relevance"]["role"] == "observe"
    assert "evaluation.metrics.relevance.role" in refusal(manifest, {})
