"""The runs a decide card's proposal was drawn from, and a check's pairs, as a person judging them reads them
(``grading.run_view``).

The round's brief keeps the runs its proposer was shown (``runs.json``); a round without them falls back on the
cycle's frozen ``evidenceRunIds``. The card's page shows each run folded: its input, output, expected answer and
the judge's verdicts.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.template.loader import render_to_string

from evolution.models import Round
from grading.models import Execution
from grading.run_view import render_run_view, run_view

#: A decide card's page shows at most this many evidence runs.
EVIDENCE_SHOWN = 10


def evidence_run_ids(rnd: Round) -> list[str]:
    """The ids of the runs the round's proposer was shown (its brief's ``runs.json``), else the cycle's frozen
    ``evidenceRunIds``; at most ``EVIDENCE_SHOWN``."""
    text = (rnd.brief or {}).get("runs.json") if isinstance(rnd.brief, dict) else None
    try:
        runs = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        runs = None
    ids = [str(r["id"]) for r in runs if isinstance(r, dict) and r.get("id")] if isinstance(runs, list) else []
    if not ids:
        frozen = rnd.cycle.frozen if isinstance(rnd.cycle.frozen, dict) else {}
        ids = [str(i) for i in frozen.get("evidenceRunIds") or [] if i]
    return ids[:EVIDENCE_SHOWN]


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def decide_card_detail(card: Any) -> str:
    """What a decide card's page shows after its text: the evidence runs of its round, each folded (a few queries)."""
    rounds = Round.objects.select_related("cycle")
    rnd = rounds.filter(card=card).first() or rounds.filter(pk=(card.payload or {}).get("round") or 0).first()
    if rnd is None:
        return ""
    ids = [i for i in evidence_run_ids(rnd) if _is_uuid(i)]
    if not ids:
        return ""
    found = {str(r.pk): r for r in Execution.objects.select_related("grade").filter(pk__in=ids)}
    runs = [found[i] for i in ids if i in found]
    shown = [
        {"run": r, "grade": r._state.fields_cache.get("grade"), "view_html": render_run_view(run_view(r))} for r in runs
    ]
    return render_to_string("evolution/cards/decide_detail.html", {"runs": shown})


#: A cycle page draws both runs of at most this many check pairs (the rest keep their "side by side" link).
PAIRS_DRAWN = 30


def attach_pair_views(checks: list[dict[str, Any]]) -> None:
    """Give each of the first ``PAIRS_DRAWN`` pairs of each check (``checks.check_view``) the two runs drawn as
    Rate runs draws a run (``views``: baseline and candidate HTML, "" for a side with no run): one query for all."""
    wanted = []
    for check in checks:
        for pair in check["pairs"][:PAIRS_DRAWN]:
            wanted += [pair["baseline"].get("runId"), pair["candidate"].get("runId")]
    ids = [str(i) for i in wanted if i and _is_uuid(i)]  # a record's id that is no run's is drawn as no run
    if not ids:
        return
    found = {str(r.pk): r for r in Execution.objects.select_related("grade").filter(pk__in=ids)}
    drawn: dict[str, str] = {}
    for check in checks:
        for pair in check["pairs"][:PAIRS_DRAWN]:
            views = {}
            for side in ("baseline", "candidate"):
                run_id = str(pair[side].get("runId") or "")
                if run_id in found and run_id not in drawn:
                    drawn[run_id] = render_run_view(run_view(found[run_id]), trace=False)
                views[side] = drawn.get(run_id, "")
            pair["views"] = views
