"""Runs' values of their metrics as the loop and the pages observe them: one reading, shared by every reader.

Seed 003, "Where the loop reads people's ratings" (R3.15, R4.10, R4.15). A run's value of a metric is
``grading.metrics.observed``: on a human-rated metric a person's rating stands over the judge's number, a reported
metric is people's alone. Over many runs:

- ``vectors`` reads one window (the trigger's, a ``should_open``'s, ``ctx.gradedRuns``, the brief's, a page's):
  each run's vector with people's ratings over the judge's, per run;
- ``sources`` decides, for two windows compared with each other (the watch, a brain's ``compare``), ONE source
  per human-rated metric for both: people when each window holds at least ``minPairs`` rated runs, else the
  judge in both (a reported metric is always people's) — so neither window's number moves merely because of
  who rated which run; ``vectors(..., sources=…)`` then reads each window from those sources.

The pre-merge check reads none of this: its pairs are judge against judge (nobody rates a replay).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from grading.metrics import human_rated, observed, specs
from grading.people import people_values
from singularity.brain.defaults import EVALUATION

PEOPLE, JUDGE = "people", "judge"


def min_pairs(terms: Mapping[str, Any]) -> int:
    """``evaluation.human.agreement.minPairs`` (engine 5)."""
    human = (terms.get("evaluation") or {}).get("human") or {}
    agreement = {**EVALUATION["human"]["agreement"], **(human.get("agreement") or {})}
    return int(agreement["minPairs"])


def source_of(spec: Mapping[str, Any], rated_before: int, rated_after: int, need: int) -> str:
    """Where one metric is read on BOTH windows: people when each holds ``need`` rated runs, else the judge.

    A reported metric is always read off people (there is no judge to fall back to); a metric people do not rate
    is the judge's (or the code's).
    """
    if spec.get("kind") == "reported":
        return PEOPLE
    if not human_rated(spec):
        return JUDGE
    return PEOPLE if rated_before >= need and rated_after >= need else JUDGE


def rated_ids(terms: Mapping[str, Any]) -> list[str]:
    """The entity's human-rated metrics (reported, or judged with human: true)."""
    return [metric_id for metric_id, spec in specs(terms).items() if human_rated(spec)]


def ratings_of(run_ids: Iterable[Any], terms: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """People's medians for ``run_ids`` by run and metric, in one query — none at all when no metric is rated."""
    ids = list(run_ids)
    return people_values(ids) if ids and rated_ids(terms) else {}


def vector_of(
    terms_specs: Mapping[str, Mapping[str, Any]],
    rated: list[str],
    judged: Mapping[str, Any] | None,
    people: Mapping[str, float] | None,
    sources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One run's observed vector from its grade's vector ``judged`` and people's medians ``people``.

    With ``sources`` (two windows compared), a metric read off the judge takes the judge's number whoever rated
    the run, and one read off people takes people's only (an unrated run has none there).
    """
    vector = dict(judged or {})
    people = people or {}
    for metric_id in rated:
        spec = terms_specs[metric_id]
        source = (sources or {}).get(metric_id)
        if source == JUDGE:
            value = vector.get(metric_id) if spec.get("kind") != "reported" else people.get(metric_id)
        elif source == PEOPLE:
            value = people.get(metric_id)
        else:
            value = observed(spec, vector.get(metric_id), people.get(metric_id))
        if value is None:
            vector.pop(metric_id, None)
        else:
            vector[metric_id] = value
    return vector


def vectors(
    runs: Iterable[tuple[Any, Mapping[str, Any] | None]],
    terms: Mapping[str, Any],
    *,
    people: Mapping[str, Mapping[str, float]] | None = None,
    sources: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Each run's observed vector by its id (as text): ``runs`` are (run id, the grade's vector) pairs.

    ``people`` is ``ratings_of`` for those runs when the caller has read it (read here otherwise, in one query).
    """
    runs = list(runs)
    rated = rated_ids(terms)
    if not rated:
        return {str(run): dict(vector or {}) for run, vector in runs}
    if people is None:
        people = people_values([run for run, _ in runs])
    metric_specs = specs(terms)
    return {str(run): vector_of(metric_specs, rated, vector, people.get(str(run)), sources) for run, vector in runs}


def sources(
    terms: Mapping[str, Any],
    before: Iterable[Any],
    after: Iterable[Any],
    people: Mapping[str, Mapping[str, float]],
) -> dict[str, str]:
    """The one source of each human-rated metric for two windows of run ids compared with each other (R4.15)."""
    before, after = [str(run) for run in before], [str(run) for run in after]
    need = min_pairs(terms)
    metric_specs = specs(terms)
    chosen = {}
    for metric_id in rated_ids(terms):
        counted_before = sum(people.get(run, {}).get(metric_id) is not None for run in before)
        counted_after = sum(people.get(run, {}).get(metric_id) is not None for run in after)
        chosen[metric_id] = source_of(metric_specs[metric_id], counted_before, counted_after, need)
    return chosen
