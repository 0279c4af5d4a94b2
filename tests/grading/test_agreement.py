"""Judge agreement corrected for chance beside the seed's share (issue 31, item 4).

Cohen's κ (two-valued), quadratic-weighted κ (ordinal), Krippendorff's α (continuous), each with a seeded
bootstrap 95 % interval; checked against textbook cases and the libraries' own answers.
"""

from __future__ import annotations

import html

import numpy as np
import pytest
from django.urls import reverse
from sklearn.metrics import cohen_kappa_score

from grading import agreement as A
from grading.calibration import calibration
from grading.models import Rating
from tests.grading.rating_helpers import JUDGE, THUMBS, make_entity, make_grade, make_run, metric
from tests.grading.test_calibration import START, paired_run

pytestmark = pytest.mark.django_db


def textbook() -> list[tuple[float, float]]:
    """Cohen's two readers of 50 proposals: yes/yes 20, yes/no 5, no/yes 10, no/no 15 — κ = 0.4 by hand
    (po = 0.7, pe = 0.5·0.6 + 0.5·0.4 = 0.5, κ = (0.7 − 0.5) / (1 − 0.5))."""
    return [(1.0, 1.0)] * 20 + [(1.0, 0.0)] * 5 + [(0.0, 1.0)] * 10 + [(0.0, 0.0)] * 15


def test_cohens_kappa_of_the_textbook_case_is_0_4_with_an_interval_around_it():
    found = A.chance_corrected(textbook(), A.BINARY, points=[0.0, 1.0], seed=7)
    assert found.statistic == "Cohen's κ" and found.value == pytest.approx(0.4)
    assert found.low < 0.4 < found.high and found.low > 0.0 and found.high < 0.75
    assert A.chance_corrected(textbook(), A.BINARY, points=[0.0, 1.0], seed=7) == found, "seeded: the same twice"


def test_the_vectorized_kappa_is_the_librarys_on_every_resample():
    rng = np.random.default_rng(3)
    for weights, k in ((None, 2), ("quadratic", 5)):
        a = rng.integers(0, k, size=(40, 15))
        b = np.clip(a + rng.integers(-1, 2, size=a.shape), 0, k - 1)
        ours = A.kappa_many(a, b, k, weights)
        theirs = [cohen_kappa_score(x, y, labels=list(range(k)), weights=weights) for x, y in zip(a, b, strict=True)]
        assert ours == pytest.approx(theirs)


def test_weighted_kappa_of_a_hand_computed_ordinal_case():
    """Three runs on a 1–5 scale (0, ½, 1 on 0..1), judge one step high on the middle one: quadratic weights over
    the five points, by hand."""
    pairs = [(0.0, 0.0), (0.75, 0.5), (1.0, 1.0)]
    found = A.chance_corrected(pairs, A.ORDINAL, points=[0, 0.25, 0.5, 0.75, 1.0])
    # By hand: labels 0..4; observed cells (0,0) (3,2) (4,4) at 1/3 each: Σw·o = (3−2)²/3 = 1/3.
    # Margins judge {0,3,4}, people {0,2,4} at 1/3 each: Σw·e = Σ (i−j)²/9 over i∈{0,3,4}, j∈{0,2,4}
    # = (0+4+16 + 9+1+1 + 16+4+0)/9 = 51/9, so κ = 1 − (1/3)/(51/9) = 16/17.
    assert found.value == pytest.approx(16 / 17)
    assert found.statistic == "weighted κ (quadratic)"


def test_krippendorffs_alpha_is_the_reference_librarys_for_two_coders():
    krippendorff = pytest.importorskip("krippendorff")
    rng = np.random.default_rng(5)
    for _ in range(5):
        judge = rng.random(12)
        people = np.clip(judge + rng.normal(0, 0.2, 12), 0, 1)
        reference = krippendorff.alpha(reliability_data=np.vstack([judge, people]), level_of_measurement="interval")
        found = A.chance_corrected(list(zip(judge, people, strict=True)), A.CONTINUOUS)
        assert found.value == pytest.approx(reference, abs=1e-9)
        assert found.low <= found.value <= found.high


def test_the_kind_follows_the_scale():
    assert A.kind_of(THUMBS) == A.BINARY
    assert A.kind_of({"min": 1, "max": 5, "step": 1}) == A.ORDINAL
    assert A.kind_of({"min": 0, "max": 100, "step": None}) == A.CONTINUOUS
    assert A.kind_of(None) == A.CONTINUOUS


def thumbs_entity():
    return make_entity(
        metrics={
            "layout_fit": metric(
                kind="judged", human=True, direction="max", unit="score", role="guard", scale=THUMBS, criterion="Fit"
            )
        }
    )


def test_a_judge_that_always_answers_1_where_people_mostly_say_1_reads_calibrated_but_kappa_is_0_and_warns(alice):
    entity = thumbs_entity()
    for n in range(20):
        paired_run(entity, alice, n, 1.0, 0.0 if n in (4, 13) else 1.0)
    (found,) = calibration(entity)
    assert (found.status, found.agreement) == ("ok", 0.9)  # the seed's rule: 18 of 20 within 0.25
    assert found.chance.statistic == "Cohen's κ" and found.chance.value == pytest.approx(0.0)
    assert "calibrated by the seed's rule, but Cohen's κ" in found.warning and "below 0.4" in found.warning


def test_a_judge_that_tells_runs_apart_has_a_high_kappa_and_no_warning(alice):
    entity = thumbs_entity()
    for n in range(20):
        value = 1.0 if n % 2 else 0.0
        paired_run(entity, alice, n, value, value)
    (found,) = calibration(entity)
    assert found.status == "ok" and found.chance.value == pytest.approx(1.0) and found.chance.low > 0.4
    assert found.warning == ""


def test_the_api_page_and_table_show_kappa_beside_agreement(alice, client):
    entity = thumbs_entity()
    for n in range(20):
        paired_run(entity, alice, n, 1.0, 0.0 if n in (4, 13) else 1.0)
    client.force_login(alice)
    api = client.get(reverse("api-grading-calibration", args=[entity.target_kind, entity.slug])).json()
    [row] = api
    assert row["agreement"] == 0.9 and row["chance"]["statistic"] == "Cohen's κ"
    assert row["chance"]["value"] == pytest.approx(0.0) and row["warning"].startswith("calibrated by the seed's rule")
    page = html.unescape(client.get(entity.get_absolute_url()).content.decode())
    assert "Cohen's κ 0.00 (95 % 0.00–0.00)" in page and "much of the agreement could be chance" in page


def test_a_people_split_between_steps_is_its_own_answer(alice, bob):
    entity = thumbs_entity()
    run = make_run(entity, completed_at=START)
    make_grade(run, metrics={"layout_fit": 1.0}, judge=JUDGE)
    for person, value in ((alice, 1.0), (bob, 0.0)):
        Rating.objects.create(execution=run, metric_id="layout_fit", user=person, value=value, normalized=value)
    for n in range(1, 6):
        paired_run(entity, alice, n, float(n % 2), float(n % 2))
    (found,) = calibration(entity)
    assert found.chance.value is not None  # 0.5 joined the labels; nothing refused


def test_the_policy_view_says_so_next_to_every_gate_that_rests_on_a_shaky_calibration(alice, client):
    entity = thumbs_entity()
    entity.terms = {
        **entity.terms,
        "loop": {"enabled": True, "autonomy": {"decide": "auto", "merge": "auto", "requireCalibration": True}},
    }
    entity.save(update_fields=["terms"])
    for n in range(20):
        paired_run(entity, alice, n, 1.0, 0.0 if n in (4, 13) else 1.0)
    client.force_login(alice)
    page = client.get(reverse("evolution:entity-policy", args=[entity.target_kind, entity.slug])).content.decode()
    page = html.unescape(page)
    for knob in ("decide", "merge", "requireCalibration"):
        row = page.split(f'id="knob-loop-autonomy-{knob}"', 1)[1].split("</tr>", 1)[0]
        assert "Rests on calibration — layout_fit: calibrated by the seed's rule, but Cohen's κ" in row, knob
    row = page.split('id="knob-loop-autonomy-mergeMethod"', 1)[1].split("</tr>", 1)[0]
    assert "Rests on calibration" not in row
