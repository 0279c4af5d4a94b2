"""The bundled demo brain: it loads cleanly, its triage rules label tickets, its pricing is a seeded simulation."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from singularity.brain.git import Checkout, clone, init_bare_from
from singularity.brain.loader import load_brain
from singularity.brain.modules import module_from_source
from singularity.demo_model import classify, demo_policy, parse_rules
from tests.fakes.gateway import FakeGateway

BRAIN: Path = settings.DEMO_BRAIN_DIR
TRIAGE = BRAIN / "features/support/triage"
PRICING = BRAIN / "features/pricing"


def body_of(path: Path) -> str:
    """The markdown after the frontmatter block."""
    text = path.read_text()
    assert text.startswith("---\n")
    return text.split("\n---\n", 1)[1]


def tickets() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (TRIAGE / "tickets.jsonl").read_text().splitlines() if line.strip()]


def pipeline(source: bytes | None = None) -> Any:
    raw = source if source is not None else (PRICING / "pricing.pipeline.py").read_bytes()
    module, _ = module_from_source("features/pricing/pricing.pipeline.py", raw)
    return module


@dataclass(frozen=True)
class Run:
    """The fields measure() reads (the engine passes a RunInfo with more)."""

    input: dict[str, Any]
    output: Any
    replay: bool = False


@pytest.fixture(scope="module")
def demo_checkout(tmp_path_factory: pytest.TempPathFactory) -> Checkout:
    root = tmp_path_factory.mktemp("demo-brain")
    init_bare_from(BRAIN, root / "brain.git")
    return clone(str(root / "brain.git"), root / "checkout")


# --- Loading ----------------------------------------------------------------


def test_the_demo_brain_loads_every_entity_without_an_error(demo_checkout: Checkout) -> None:
    snapshot = load_brain(demo_checkout, demo_checkout.head())
    assert snapshot.errors == []
    kinds = {entity.slug: entity.kind for entity in snapshot.entities}
    assert kinds == {
        "triage": "workflow",
        "urgency": "workflow",
        "pricing": "pipeline",
        "pulse": "heartbeat",
        "helpdesk": "role",
        "fixer": "pipeline",
        "pricer": "pipeline",
    }
    assert {entity.slug: entity.error for entity in snapshot.entities} == {
        "triage": "",
        "urgency": "",
        "pricing": "",
        "pulse": "",
        "helpdesk": "",
        "fixer": "",
        "pricer": "",
    }
    assert "default" in snapshot.methods


def test_the_demo_brain_resolves_the_terms_it_declares(demo_checkout: Checkout) -> None:
    entities = {e.slug: e for e in load_brain(demo_checkout, demo_checkout.head()).entities}
    triage = entities["triage"].terms
    assert triage["evaluation"]["method"] == "none"
    assert triage["evaluation"]["sample"] == {"rate": 1, "maxPerDay": 500}
    assert triage["evaluation"]["metrics"]["accuracy"]["role"] == "objective"
    assert triage["loop"]["enabled"] is True and triage["loop"]["preset"] == "repair"
    assert triage["loop"]["trigger"]["windowRuns"] == 5 and triage["loop"]["trigger"]["minFailures"] == 2
    assert entities["triage"].loop_module_path == "features/support/triage/triage.loop.py"
    # Triage and urgency share an outcome: one lock group, declared in the manifest, that holds repairs too.
    assert triage["loop"]["groups"] == {"support": {"lock": True, "repair": "wait"}}
    assert triage["loop"]["group"] == ["support"] and entities["urgency"].terms["loop"]["group"] == ["support"]
    assert entities["pricing"].pipeline_path == "features/pricing/pricing.pipeline.py"
    assert entities["pricing"].terms["loop"]["preset"] == "evolve"
    assert entities["pulse"].schedule == "*/5 * * * *"
    assert entities["pulse"].terms["evaluation"]["sample"]["maxPerDay"] == 300


# --- Triage -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("ticket", "label"),
    [
        ("I was charged twice for my March subscription, please fix it.", "billing"),
        ("Found a bug: the date picker skips February 29.", "technical"),
        ("What are your support hours on weekends?", "general"),
        # The rules are incomplete on purpose: "crashes" is not "crash".
        ("The app crashes as soon as I upload a photo from my phone.", "general"),
    ],
)
def test_the_triage_rules_label_tickets_through_the_demo_model(
    fake_gateway: FakeGateway, ticket: str, label: str
) -> None:
    fake_gateway.handler = demo_policy
    messages = [
        {"role": "system", "content": body_of(TRIAGE / "triage.scenario.md")},
        {"role": "user", "content": json.dumps({"text": ticket, "_expected": "billing"})},
    ]
    answer = fake_gateway.gateway().complete(model="demo-model", messages=messages, tools=[])
    assert answer.content == label


def test_the_tickets_are_labelled_in_three_classes() -> None:
    labels = [t["_expected"] for t in tickets()]
    assert len(labels) >= 40
    assert set(labels) == {"billing", "technical", "general"}
    assert all(isinstance(t["text"], str) and t["text"] for t in tickets())


def test_the_incomplete_rules_get_about_sixty_percent_of_the_tickets_right() -> None:
    rules = parse_rules(body_of(TRIAGE / "triage.scenario.md"))
    assert rules is not None
    right = sum(classify(rules, t["text"]) == t["_expected"] for t in tickets())
    assert right / len(tickets()) == pytest.approx(0.6)


def test_triage_accuracy_compares_the_trimmed_lowercased_result_with_the_label() -> None:
    module, _ = module_from_source("triage.loop.py", (TRIAGE / "triage.loop.py").read_bytes())
    ticket = {"text": "x", "_expected": "billing"}
    assert module.measure(Run(ticket, {"result": " Billing\n"})) == [{"id": "accuracy", "value": 1.0}]
    assert module.measure(Run(ticket, {"result": "general"})) == [{"id": "accuracy", "value": 0.0}]
    assert module.measure(Run(ticket, None)) == [{"id": "accuracy", "value": 0.0}]
    assert module.measure(Run(ticket, {"result": "billing"}, replay=True)) == [{"id": "accuracy", "value": 1.0}]
    assert module.measure(Run({"text": "x"}, {"result": "billing"})) == []


# --- Pricing ----------------------------------------------------------------


def test_the_pricing_simulation_is_deterministic_per_seed() -> None:
    run = pipeline().run
    assert run(None, {"seed": 7}) == run(None, {"seed": 7})
    assert {run(None, {"seed": seed})["buyers"] for seed in range(10)} != {run(None, {"seed": 0})["buyers"]}


def test_pricing_revenue_is_price_times_buyers() -> None:
    result = pipeline().run(None, {"seed": 3})
    assert result["price"] == "22.00"
    assert result["revenue"] == str(22 * result["buyers"]) + ".00"
    assert 0 < result["buyers"] < result["customers"]


def test_pricing_revenue_changes_with_price() -> None:
    source = (PRICING / "pricing.pipeline.py").read_bytes()
    assert b"PRICE = 22.0\n" in source
    cheaper = pipeline(source.replace(b"PRICE = 22.0\n", b"PRICE = 14.0\n"))
    before = [pipeline().run(None, {"seed": s}) for s in range(20)]
    after = [cheaper.run(None, {"seed": s}) for s in range(20)]
    assert sum(float(r["revenue"]) for r in after) > sum(float(r["revenue"]) for r in before)
    assert all(a["buyers"] >= b["buyers"] for a, b in zip(after, before, strict=True))


def test_pricing_refuses_a_seed_that_is_not_an_integer() -> None:
    with pytest.raises(ValueError, match="input.seed must be an integer"):
        pipeline().run(None, {"seed": "seven"})


def test_pricing_measures_revenue_and_conversion_from_the_output() -> None:
    module, _ = module_from_source("pricing.loop.py", (PRICING / "pricing.loop.py").read_bytes())
    output = pipeline().run(None, {"seed": 1})
    values = {m["id"]: m["value"] for m in module.measure(Run({"seed": 1}, output))}
    assert values == {
        "revenue": float(output["revenue"]),
        "conversion": output["buyers"] / output["customers"],
        "margin": float(output["margin"]),
    }
    assert module.measure(Run({"seed": 1}, None)) == []
