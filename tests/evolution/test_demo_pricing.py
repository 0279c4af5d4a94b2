"""The demo pricing pipeline evolves by itself: its cadence opens cycles, the pricer moves PRICE toward the
revenue peak, the watch compares revenue through the interval (conversion and margin as guards), and a too-deep
discount is regressed by the margin guard and reverted — all through the real runners, grading and local forge."""

from __future__ import annotations

import pytest

from evolution.loop import machine
from evolution.models import Cycle
from grading.demo import PRICING_PATH
from grading.models import Entity, Execution
from grading.runners import run_entity
from grading.sync import current_checkout
from singularity.brain.modules import module_from_source
from tests.evolution.demo_helpers import celery_eager, embedded  # noqa: F401 - fixtures

pytestmark = [pytest.mark.django_db(transaction=True)]


def pricing() -> Entity:
    return Entity.objects.get(path=PRICING_PATH, present=True)


def parameters() -> tuple[float, float]:
    """(PRICE, DISCOUNT) in the pricing pipeline at the entity's commit."""
    entity = pricing()
    text = current_checkout().read_at(entity.commit, entity.pipeline_path).decode()
    lines = dict(line.split(" = ", 1) for line in text.splitlines() if line.startswith(("PRICE = ", "DISCOUNT = ")))
    return float(lines["PRICE"]), float(lines["DISCOUNT"])


def drive(runs: int, seed: list[int]) -> None:
    """Run the pricing pipeline ``runs`` times on fresh markets; the watch reads as the grades land."""
    for _ in range(runs):
        run_entity(pricing(), input={"seed": seed[0]}, source=Execution.Source.DEMO)
        seed[0] += 1
        machine.watch_tick()


def settled() -> list[Cycle]:
    return list(Cycle.objects.filter(entity=pricing(), analysed=True).exclude(status="").order_by("started_at"))


def test_the_pricing_pipeline_evolves_toward_the_peak_and_a_too_deep_discount_is_reverted(embedded):  # noqa: F811
    seed = [0]
    assert parameters() == (22.0, 0.0)
    drive(10, seed)  # the cadence: the tenth grade opens a cycle; the pricer proposes, the loop accepts and merges
    [cycle] = Cycle.objects.filter(entity=pricing(), analysed=True)
    assert cycle.origin == Cycle.Origin.GRADE and len(cycle.window["runIds"]) == 10
    assert cycle.phase == Cycle.Phase.WATCHING, cycle.reason
    assert 18 < parameters()[0] < 19 and parameters()[1] == 0.0  # halfway from 22 to the peak near 15
    drive(10, seed)  # the watch's window: revenue up, conversion up, margin inside its band
    first = settled()[0]
    assert first.status == Cycle.Status.VALIDATED, first.reason
    revenue = next(m for m in first.watch_verdict["perMetric"] if m["metric"] == "revenue")
    assert revenue["spread"] is not None and float(revenue["spread"][0]) > 0

    for _ in range(6):  # more cadences: toward the peak (15), then the launch discount, regressed and reverted
        drive(20, seed)
        if any(c.status == Cycle.Status.REGRESSED for c in settled()):
            break
    regressed = next(c for c in settled() if c.status == Cycle.Status.REGRESSED)
    assert regressed.watch_verdict["rule"] == 1
    assert "margin stands at" in regressed.reason and "under its floor 0.3" in regressed.reason
    drive(2, seed)  # the revert merges through the same auto gate
    regressed.refresh_from_db()
    assert regressed.rounds.get().revert_outcome == "merged"
    price, discount = parameters()
    assert discount == 0.0 and 14 < price < 16.5


def test_the_pricer_reads_demand_off_the_runs_and_proposes_halfway_to_the_peak():
    from pathlib import Path

    from django.conf import settings

    root = Path(settings.DEMO_BRAIN_DIR)
    pricer, _ = module_from_source(
        "pricer.pipeline.py", (root / "features/loop/pricer/pricer.pipeline.py").read_bytes()
    )
    content = (root / "features/pricing/pricing.pipeline.py").read_text()
    brief = {
        "definition": {"files": [{"path": "features/pricing/pricing.pipeline.py", "content": content}]},
        "runs": [{"output": {"price": "22.00", "buyers": 53, "customers": 200}}] * 3,
        "lessons": [],
    }
    answer = pricer.run(None, brief)
    assert "PRICE = 18.48\n" in answer["files"][0]["content"]  # halfway to the peak 22 / (1 − 0.265) / 2 ≈ 14.97
    at_peak = {
        **brief,
        "definition": {
            "files": [{"path": "p.pipeline.py", "content": content.replace("PRICE = 22.0", "PRICE = 15.0")}]
        },
        "runs": [{"output": {"price": "15.00", "buyers": 100, "customers": 200}}],
    }
    assert "DISCOUNT = 0.4" in pricer.run(None, at_peak)["files"][0]["content"]
    lost = {**at_peak, "lessons": [{"outcome": "regressed", "summary": "Try a launch discount of 40%"}]}
    assert pricer.run(None, lost) is None
