"""How strongly a cycle's verdict was measured, how its experiment came out, and where it ended — derived at read.

Seed 003, "Verdict strength — paired, measured, blind" and "The cycle's
grade". Nothing here is stored: each function reads the rows (the cycle's
``watch_verdict``, its rounds' ``check_verdict`` and merge) and answers the
same way for the breaker, the lessons, the history and the dashboard.

- ``strength``: None when nothing shipped; ``paired`` when a pre-merge check
  compared pairs and the watch measured; ``measured`` when either measured
  something; ``blind`` when nothing did.
- ``grade``: (label, n) — Improvement / Regression / Inconclusive off the
  watch's verdict, Regression / Tradeoff off the check of a candidate it
  regressed; None when there is no verdict.
- ``status_label``: Kept, Reverted, Unverified, … or the live phase's words.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from evolution.models import Cycle, Round

PAIRED, MEASURED, BLIND = "paired", "measured", "blind"


# --- Reading the rows ---------------------------------------------------------------------


def _rounds(cycle: Cycle) -> list[Round]:
    """The cycle's rounds, newest first, read through ``cycle.rounds.all()`` so a prefetch serves them."""
    return sorted(cycle.rounds.all(), key=lambda r: r.number, reverse=True)


def shipped_round(cycle: Cycle) -> Round | None:
    """Return the round whose PR merged (at most one per cycle), or None."""
    return next((r for r in _rounds(cycle) if r.merge_sha), None)


def check_measured(check_verdict: dict[str, Any] | None) -> bool:
    """Whether a pre-merge check's record measured something: it compared pairs or read metrics."""
    if not isinstance(check_verdict, dict) or check_verdict.get("inconclusive") or not check_verdict.get("verdict"):
        return False  # the judge was sick, there was no bar, the comparator failed, or it never answered
    if "judged" in check_verdict:
        return int(check_verdict.get("judged") or 0) > 0
    return bool(check_verdict.get("perMetric") or check_verdict.get("pairs"))


def watch_measured(cycle: Cycle) -> bool:
    """Whether the watch measured the shipped change.

    The engine's own comparators (the count, a should_open) measured when
    they counted at least one graded run — a validated or regressed count
    always did; a window closed short with nothing counted did not. A
    comparator of the brain's (compare) measured when its record carries
    perMetric: an empty one reads as nothing measured. No record (judge
    unhealthy, a comparator that failed, watch.mode none) measured nothing.
    """
    if getattr(cycle, "confounded_by", None) or getattr(cycle, "confounded_by_edit", None):
        return False  # another change landed inside the window: it measured nothing of this one
    record = cycle.watch_verdict
    if not isinstance(record, dict):
        return False
    if record.get("comparator") in ("count", "should_open"):
        return int(record.get("n") or 0) > 0
    return bool(record.get("perMetric"))


def strength(cycle: Cycle) -> str | None:
    """Return "paired", "measured" or "blind" for a shipped change's verdict; None when nothing shipped or is settled.

    A live cycle (still watching) has no strength yet.
    """
    shipped = shipped_round(cycle)
    if shipped is None or not cycle.status:
        return None
    checked, watched = check_measured(shipped.check_verdict), watch_measured(cycle)
    if checked and watched:
        return PAIRED
    if checked or watched:
        return MEASURED
    return BLIND


def seen_only(cycle: Cycle) -> bool:
    """Whether the shipped change's check validated on inputs its proposer was all shown (held-out 0 of n)."""
    shipped = shipped_round(cycle)
    record = shipped.check_verdict if shipped is not None and isinstance(shipped.check_verdict, dict) else {}
    power = record.get("power") if isinstance(record.get("power"), dict) else {}
    return record.get("verdict") == "validated" and bool(power.get("seenOnly"))


def strength_words(cycle: Cycle) -> str | None:
    """The strength as people read it: "paired", or "paired — validated on seen inputs only" (issue 31)."""
    found = strength(cycle)
    if found is None:
        return None
    return f"{found} — validated on seen inputs only" if found != BLIND and seen_only(cycle) else found


# --- The cycle's grade --------------------------------------------------------------------


def _number(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def objective_cleared(check_verdict: dict[str, Any]) -> bool:
    """Whether a check's record shows its objective clearing its bar (a guard vetoed the rest: a tradeoff).

    Read off the record's perMetric: an objective entry marked ``cleared``,
    or one whose ``gain`` exceeds its ``band`` (else its ``allowed``).
    """
    for entry in check_verdict.get("perMetric") or []:
        if not isinstance(entry, dict) or entry.get("role") != "objective":
            continue
        if entry.get("cleared") is True:
            return True
        gain, bar = _number(entry.get("gain")), _number(entry.get("band", entry.get("allowed")))
        if gain is not None and bar is not None and gain > bar:
            return True
    return False


def _check_n(round: Round) -> int:
    record = round.check_verdict or {}
    pairs = record.get("pairs")
    if isinstance(pairs, list) and pairs:
        return len(pairs)
    return len(round.check_run_ids or [])


def _watch_n(cycle: Cycle) -> int:
    record = cycle.watch_verdict or {}
    if record.get("n") is not None:
        return int(record["n"])
    return len((cycle.watch_window or {}).get("runIds") or [])


def check_regressed_round(cycle: Cycle) -> Round | None:
    """Return the round whose candidate the pre-merge check regressed (it never shipped), or None."""
    for round in _rounds(cycle):
        verdict = round.check_verdict if isinstance(round.check_verdict, dict) else {}
        if not round.merge_sha and verdict.get("verdict") == "regressed":
            return round
    return None


def grade(cycle: Cycle) -> tuple[str, int] | None:
    """Return (label, n) — how the experiment came out and how many runs (or pairs) that rests on — or None.

    A shipped change is graded off the watch's record: validated is an
    Improvement, regressed a Regression, unvalidated Inconclusive; no record
    (judge unhealthy, comparator failed, mode none) is no grade. A candidate
    the check regressed never shipped and is graded off the check's record: a
    Regression, or a Tradeoff when its objective cleared its bar. A live,
    skipped or failed cycle, and one never merged for any other reason, has none.
    """
    if not cycle.status:
        return None
    if shipped_round(cycle) is not None:
        record = cycle.watch_verdict
        if not isinstance(record, dict):
            return None
        label = {"validated": "Improvement", "regressed": "Regression", "unvalidated": "Inconclusive"}.get(
            str(record.get("verdict"))
        )
        return (label, _watch_n(cycle)) if label else None
    regressed = check_regressed_round(cycle)
    if regressed is None:
        return None
    label = "Tradeoff" if objective_cleared(regressed.check_verdict) else "Regression"
    return label, _check_n(regressed)


# --- Where it ended -----------------------------------------------------------------------

LIVE_WORDS = {
    Cycle.Phase.ANALYSING: "Analysing",
    Cycle.Phase.DECIDING: "Waiting on a decision",
    Cycle.Phase.APPLYING: "Applying",
    Cycle.Phase.CHECKING: "Checking",
    Cycle.Phase.MERGE_WAIT: "PR open",
    Cycle.Phase.WATCHING: "Watching",
    Cycle.Phase.REVERTING: "Reverting",
}


def status_label(cycle: Cycle) -> str:
    """Return where the cycle ended, for a person — or the live phase's words while it runs.

    validated → Kept; regressed → Reverted once the revert merged, Reverting
    while it is followed, "Regressed, revert closed/expired" when the revert
    did not land (the change stays live); unvalidated → Unverified for a
    shipped change ("Reverted by policy (unproven)" when the policy revert merged), "Not merged" for
    a PR that never merged; skipped → Skipped; failed → Failed.
    """
    if cycle.phase == Cycle.Phase.REVERTING:
        if cycle.reverted_by_policy:
            return "Reverting by policy (unproven)"  # R13.19: an unproven change, not a regression
        return LIVE_WORDS[Cycle.Phase.REVERTING]
    if not cycle.status:
        return LIVE_WORDS.get(cycle.phase, str(cycle.phase).capitalize())
    if cycle.status == Cycle.Status.VALIDATED:
        return "Kept"
    if cycle.status == Cycle.Status.SKIPPED:
        return "Skipped"
    if cycle.status == Cycle.Status.FAILED:
        return "Failed"
    shipped = shipped_round(cycle)
    outcome = shipped.revert_outcome if shipped is not None else ""
    if cycle.status == Cycle.Status.REGRESSED:
        if shipped is None and check_regressed_round(cycle) is not None:
            return "Closed by the check"
        if outcome == "merged":
            return "Reverted"
        return f"Regressed, revert {outcome}" if outcome else "Regressed"
    if shipped is None:
        return "Not merged"
    # An unproven change the policy reverted (watch.onInconclusive: revert) says so, never "regressed" (R13.19).
    if outcome == "merged":
        return "Reverted by policy (unproven)"
    return f"Unverified, policy revert {outcome}" if outcome else "Unverified"


#: A cycle's machine phase as a person reads it (pages, refusals, notices): never "merge_wait" or "Merge Wait".
PHASE_WORDS = {
    "analysing": "analysing the evidence",
    "deciding": "waiting on a person's decision",
    "applying": "applying the change",
    "checking": "checking before the merge",
    "merge_wait": "waiting for the merge",
    "watching": "watching after the merge",
    "reverting": "following the revert",
    "settled": "settled",
}


def phase_words(phase: object) -> str:
    """Return ``phase`` in people's words; an unknown one with its underscores as spaces."""
    return PHASE_WORDS.get(str(phase), str(phase or "").replace("_", " "))


def phase_label(phase: object) -> str:
    """Return the phase as a sentence names it ("Analysing", "Deciding"): its label, never "Merge Wait"."""
    if phase == Cycle.Phase.MERGE_WAIT:
        return "Waiting for the merge"
    return Cycle.Phase(phase).label if phase in Cycle.Phase.values else str(phase or "").replace("_", " ")


#: What marks a settle that writes no lesson by design (R17.3), and the words the Learn chapter says for it.
UNATTENDED_MARK = "(unattended: closed at once)"
SET_ASIDE_MARK = "set aside: "


def no_lesson_words(cycle: Cycle) -> str:
    """Why a settled cycle wrote no lesson when that is by design (R17.3), in words; "" otherwise.

    The kill switch (a call about the loop, not a verdict on the change) and a broken round under decide: auto
    (closed at once: nothing was proposed or measured) write none; nor does a proposal set aside for a hold placed
    while the proposer worked.
    """
    from evolution.core.cycles import KILL_SWITCH_MARKS

    reason = cycle.reason or ""
    if any(mark in reason.lower() for mark in KILL_SWITCH_MARKS):
        return (
            "No lesson, by design: the loop was switched off during the analysis — a call about the loop, not a "
            "verdict on any change."
        )
    if UNATTENDED_MARK in reason:
        return (
            "No lesson, by design: a broken analysis or apply under decide: auto closes the cycle at once — "
            "nothing was proposed or measured, so there is nothing to learn from."
        )
    if reason.startswith(SET_ASIDE_MARK):
        return "No lesson, by design: the proposal was set aside for a hold placed while the proposer worked."
    return ""


def accepted_words(rnd: Any) -> str:
    """Who accepted a round, as its record reads: "Accepted by alice", "Accepted under decide: auto", or "Accepted on
    a loop:auto_accept grant" (``Round.acceptance``: person, auto, grant)."""
    if rnd.acceptance == "auto":
        return "Accepted under decide: auto"
    if rnd.acceptance == "grant":
        return "Accepted on a loop:auto_accept grant"
    return f"Accepted by {rnd.decided_by}"


def aside_words(rnd: Any) -> str:
    """A set-aside round's decision as its record reads: "Accepted by alice; set aside: lock group support is held by
    …", or "Set aside: …" for one set aside before anybody accepted it (``Round.set_aside`` says what did)."""
    if rnd.acceptance:
        return f"{accepted_words(rnd)}; set aside: {rnd.set_aside}"
    return f"Set aside: {rnd.set_aside}"
