"""The pre-merge check as people and scripts read it: the frozen inputs, each pair side by side, the rule that answered.

Read from the cycle's ``frozen`` set, the round's ``check_verdict`` record
(stored verbatim when the check answered) and, while it waits, the replays as
they stand. Nothing is recomputed from today's declarations.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from evolution.loop import check
from evolution.models import Cycle, Round
from evolution.presets import pairs as P

#: The rule that answered, in words.
RULE_WORDS = {
    "judge": "the judge's health (too many candidate replays ungraded)",
    "bar": "no bar (the incumbent has no grade on any input)",
    "a": "viability (too few pairs judged)",
    "b": "no bar (the incumbent has no grade on any input)",
    "c": "lost inputs the incumbent held",
    "d": "a critical metric's per-input veto",
    "e": "a guard's veto",
    "f": "a floor",
    "g": "must improve",
    "g′": "the objective's gain against the noise band",
    "h": "guards only (no objective measured on both sides)",
    "module": "the entity's own verdict()",
    "project": "the project's verdict()",
    "fault": "the verdict function failed",
}
VERDICT_WORDS = {"validated": "Validated", "regressed": "Regressed", "unvalidated": "Unvalidated"}


def _run_url(run_id: str | None) -> str:
    return reverse("grading:run", args=[run_id]) if run_id else ""


def _side(side: dict[str, Any], metrics: list[str]) -> dict[str, Any]:
    vector = side.get("vector") or {}
    return {
        "state": side.get("state"),
        "words": P.STATE_WORDS.get(side.get("state"), side.get("state")),
        "runId": side.get("runId"),
        "url": _run_url(side.get("runId")),
        "frozen": bool(side.get("frozen")),
        "values": [vector.get(m) for m in metrics],
    }


def pairs_of(rnd: Round) -> list[dict[str, Any]]:
    """The round's pairs input by input, as the check compared them (its record), else as its replays stand now."""
    record = rnd.check_verdict if isinstance(rnd.check_verdict, dict) else {}
    kept = record.get("pairs")
    if isinstance(kept, list) and kept and all(isinstance(p, dict) and "slot" in p for p in kept):
        return list(kept)
    if not rnd.checked_sha:
        return []
    return [p.as_json() for p in check.read_pairs(rnd.cycle, rnd)]


def compare_pairs(rnd: Round) -> list[dict[str, Any]]:
    """``loop_get_cycle``'s pairs: {baseline, candidate} run ids, input by input, with the slot and the trial.

    A round recorded with run ids but no pairs (written before the check kept its record) pairs them in order.
    """
    if not pairs_of(rnd) and (rnd.check_run_ids or rnd.baseline_run_ids):
        from itertools import zip_longest

        return [
            {"slot": index, "trial": 1, "input": "", "baseline": baseline, "candidate": candidate}
            for index, (baseline, candidate) in enumerate(
                zip_longest(rnd.baseline_run_ids or [], rnd.check_run_ids or [])
            )
        ]
    return [
        {
            "slot": p["slot"],
            "trial": p["trial"],
            "input": p.get("label") or "",
            "baseline": (p.get("baseline") or {}).get("runId"),
            "candidate": (p.get("challenger") or {}).get("runId"),
        }
        for p in pairs_of(rnd)
    ]


VOTING = ("objective", "guard")


def _metric_ids(cycle: Cycle, record: dict[str, Any]) -> list[str]:
    """The metrics that vote (objectives and guards), as the record read them, else as the entity declares them."""
    shown = [
        m.get("metric")
        for m in record.get("perMetric") or []
        if isinstance(m, dict) and m.get("metric") and m.get("role") in VOTING
    ]
    if shown:
        return shown
    metrics = ((cycle.entity.terms or {}).get("evaluation") or {}).get("metrics") or {}
    return [m for m, spec in metrics.items() if spec.get("role") in VOTING]


def _short(source: str) -> str:
    """ "run 58b101c7-…" as a person reads it: the run's first eight characters."""
    kind, _, ident = source.partition(" ")
    return f"{kind} {ident[:8]}" if kind == "run" and len(ident) > 8 else source


def check_view(cycle: Cycle, rnd: Round) -> dict[str, Any] | None:
    """What the cycle story's Check chapter shows for ``rnd`` (None when the round was never checked)."""
    if not rnd.checked_sha:
        return None
    record = rnd.check_verdict if isinstance(rnd.check_verdict, dict) else {}
    raw = pairs_of(rnd)
    metrics = _metric_ids(cycle, record)
    lost = {row.get("slot") for row in record.get("perInput") or [] if isinstance(row, dict) and row.get("lost")}
    rows = []
    for p in raw:
        baseline, candidate = p.get("baseline") or {}, p.get("challenger") or {}
        rows.append(
            {
                "slot": p["slot"],
                "trial": p["trial"],
                "label": p.get("label") or "",
                "source": _short(p.get("source") or ""),
                "heldOut": p.get("heldOut"),
                "golden": p.get("golden"),
                "lost": p["slot"] in lost,
                "baseline": _side(baseline, metrics),
                "candidate": _side(candidate, metrics),
                "cells": [
                    {
                        "metric": m,
                        "before": (baseline.get("vector") or {}).get(m),
                        "after": (candidate.get("vector") or {}).get(m),
                    }
                    for m in metrics
                ],
                "compare": (
                    f"{_run_url(candidate.get('runId'))}?compare={baseline.get('runId')}"
                    if candidate.get("runId") and baseline.get("runId")
                    else ""
                ),
            }
        )
    done = sum(r["baseline"]["state"] != P.UNFINISHED and r["candidate"]["state"] != P.UNFINISHED for r in rows)
    verdict = record.get("verdict")
    return {
        "round": rnd.number,
        "checkedSha": rnd.checked_sha,
        "baseSha": (cycle.frozen or {}).get("baseSha"),
        "answered": bool(verdict) or record.get("reason") == "merged before the pre-merge check answered",
        "verdict": verdict,
        "verdictWords": VERDICT_WORDS.get(verdict or "", "No verdict"),
        "inconclusive": bool(record.get("inconclusive")),
        "rule": record.get("rule"),
        "ruleWords": RULE_WORDS.get(record.get("rule") or "", record.get("rule") or ""),
        "reason": record.get("reason") or "",
        "shippedByPolicy": bool(record.get("shippedByPolicy")),
        "onInconclusive": record.get("onInconclusive"),
        "heldOut": (cycle.frozen or {}).get("heldOut"),
        "power": record.get("power") if isinstance(record.get("power"), dict) else None,
        "metrics": metrics,
        "perMetric": [m for m in record.get("perMetric") or [] if isinstance(m, dict) and m.get("role") in VOTING],
        "observed": [
            m
            for m in record.get("perMetric") or []
            if isinstance(m, dict) and m.get("role") not in VOTING and m.get("pairs")
        ],
        "pairs": rows,
        "progress": {"done": done, "of": len(rows)},
        "deadline": cycle.check_deadline if cycle.phase == Cycle.Phase.CHECKING else None,
    }


def progress_many(cycles: list[Cycle]) -> None:
    """Read the progress of every checking cycle among ``cycles`` in one query (kept on each as ``check_progress``).

    A pair is graded when both its sides are: the candidate's replay finished (and graded, unless it died), the
    incumbent's too, or the incumbent's frozen grade stands in.
    """
    from evolution.models import Replay
    from grading.models import Execution, Grade

    checking = {c.pk: c for c in cycles if c.phase == Cycle.Phase.CHECKING}
    if not checking:
        return
    done_sides: dict[int, set[tuple[str, int, int]]] = {pk: set() for pk in checking}
    rows = Replay.objects.filter(round__cycle_id__in=list(checking), round__status=Round.Status.APPLIED).values_list(
        "round__cycle_id", "side", "slot", "trial", "execution__status", "execution__grade__status"
    )
    for cycle_id, side, slot, trial, status, graded in rows:
        if status == Execution.Status.FAILED or graded in (Grade.Status.GRADED, Grade.Status.FAILED):
            done_sides[cycle_id].add((side, slot, trial))
    for pk, cycle in checking.items():
        slots = list((cycle.frozen or {}).get("slots") or [])
        trials = check.trials_of(cycle)
        done = 0
        for index, slot in enumerate(slots):
            for trial in range(1, trials + 1):
                baseline = slot.get("score") is not None or ("incumbent", index, trial) in done_sides[pk]
                done += int(baseline and ("candidate", index, trial) in done_sides[pk])
        cycle.check_progress = (done, len(slots) * trials)  # type: ignore[attr-defined]


def progress_words(cycle: Cycle) -> str:
    """The fleet's words for a check that waits: "checking (3 of 5 pairs graded)"."""
    if getattr(cycle, "check_progress", None) is None:
        progress_many([cycle])
    done, of = getattr(cycle, "check_progress", (0, 0))
    return f"checking ({done} of {of} pairs graded)" if of else "checking"


def frozen_view(cycle: Cycle) -> list[dict[str, Any]]:
    """The frozen set's slots as the API returns them: input, held-out mark, source run or case, kept score."""
    return [
        {
            "slot": index,
            "kind": slot.get("kind"),
            "input": slot.get("input"),
            "label": slot.get("label"),
            "heldOut": bool(slot.get("heldOut")),
            "anchor": bool(slot.get("anchor")),
            "runId": slot.get("runId"),
            "caseId": slot.get("caseId"),
            "incumbentScore": slot.get("score"),
        }
        for index, slot in enumerate((cycle.frozen or {}).get("slots") or [])
    ]
