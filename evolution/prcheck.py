"""The pre-merge check for any pull request against the brain — a person's included (issue 35).

``check_pr`` runs, for every entity in the loop whose files the PR changes, what a cycle's check runs: its inputs
frozen as a cycle would freeze them (``loop.freeze.freeze``, anchored on the entity's newest graded run), the
candidate replayed at the PR's head and the incumbent at the base (``grading.replays``), each side graded, the
pairs judged by the entity's ``verdict()``, the project's or the engine's rules (``loop.check.judge_pairs``) and
recorded as the check records them (``loop.check.record``). It then posts ``singularity/validation`` on the head
(the worst answer: regressed → failure, unvalidated → error, validated → success) and a comment with the pairs.
Unlike the loop's own check it never closes the PR: a person decides.

The replays run in the caller (the command, the API request, the button's request): they are the entity's own
runs at two commits, seconds for the demo's rule-based entities; a brain whose runs take minutes wants a worker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from django.template.loader import render_to_string
from django.utils import timezone

from evolution.forges import get_forge
from evolution.forges.base import VALIDATION, fit
from evolution.loop import check, freeze
from evolution.models import Cycle, PullCheck
from evolution.presets import pairs as P
from grading.models import Entity, Execution, Grade
from grading.pin import comparable
from singularity.errors import ConfigError
from singularity.notify.events import emit

log = logging.getLogger(__name__)

MANIFEST = "constitution/MANIFEST.yaml"
#: The worst answer first: the PR's status is the worst of its entities'.
WORST = (check.REGRESSED, check.UNVALIDATED, check.VALIDATED)
STATES = {check.REGRESSED: "failure", check.UNVALIDATED: "error", check.VALIDATED: "success"}


class PullCheckError(ConfigError):
    """A PR that cannot be checked (not found, not open), named."""


@dataclass
class EntityAnswer:
    entity: Entity
    verdict: str
    reason: str
    record: dict[str, Any]


def changed_files(base_sha: str, head_sha: str, ref: str) -> list[str]:
    """The paths the PR changes from where it left the base (``base...head``), read in the engine's checkout."""
    from grading.replays import ensure_commit
    from grading.sync import current_checkout
    from singularity.brain.git import git

    checkout = current_checkout()
    ensure_commit(checkout, head_sha, ref=ref)
    ensure_commit(checkout, base_sha)
    out = git("diff", "--name-only", f"{base_sha}...{head_sha}", cwd=checkout.path)
    return [line for line in out.decode().splitlines() if line]


def entities_changed(paths: list[str]) -> list[Entity]:
    """Every entity in the loop whose files are among ``paths`` (all of them when the MANIFEST changes)."""
    changed = set(paths)
    found = []
    for entity in Entity.objects.filter(present=True, loop_enabled=True).order_by("target_kind", "slug"):
        own = {entity.path, entity.pipeline_path, entity.loop_module_path} - {""}
        if MANIFEST in changed or own & changed:
            found.append(entity)
    return found


def _side(execution: Execution | None, grade: Grade | None, judge: dict[str, Any]) -> P.Side:
    if execution is None or execution.status == Execution.Status.FAILED:
        return P.Side(P.NOT_RUN, run_id=str(execution.pk) if execution else None)
    if grade is None or grade.status != Grade.Status.GRADED or not comparable(grade.judge, judge):
        return P.Side(P.UNGRADED, run_id=str(execution.pk))
    state = P.VIABLE if grade.passed else P.FAILED
    return P.Side(state, vector=dict(grade.metrics or {}), run_id=str(execution.pk))


def _replayed(entity: Entity, value: dict[str, Any], commit: str, ref: str, number: int, now: datetime) -> Any:
    """Run one side at ``commit`` and grade it now; return (execution, grade or None)."""
    from grading.booking import GradingOff, book_exempt
    from grading.grade import grade_now
    from grading.replays import prepare_many, run_replay

    (execution,) = prepare_many(entity, [(value, commit)], now=now)
    execution = run_replay(execution, ref=ref)
    if execution.status != Execution.Status.SUCCEEDED:
        return execution, None
    try:
        return execution, grade_now(book_exempt(execution, f"pr-check:{number}"))
    except GradingOff as exc:
        log.warning("pr check #%s: %s cannot be graded: %s", number, entity, exc)
        return execution, None


def check_entity(entity: Entity, *, number: int, head: str, ref: str, base: str, now: datetime) -> EntityAnswer:
    """The check of one entity at the PR's head against the base, as a cycle's check would answer it."""
    from grading.current_judge import current_judge

    anchor = (
        Execution.objects.filter(entity=entity, loop_launched=False, grade__status=Grade.Status.GRADED)
        .order_by("-completed_at")
        .first()
    )
    # An unsaved cycle: what freeze() and judge_pairs() read of one (the entity, its anchor, its judge, the set).
    cycle = Cycle(entity=entity, anchor=anchor, judge=current_judge(entity), terms=entity.terms, window={})
    frozen = freeze.freeze(cycle, now=now)
    if frozen is None:
        why = "no pre-merge check: this entity is judged by the watch after the merge (check.mode none)"
        return EntityAnswer(entity, check.VALIDATED, why, {"verdict": check.VALIDATED, "reason": why, "pairs": []})
    frozen["baseSha"] = base
    cycle.frozen = frozen
    trials = max(1, int((frozen.get("terms") or {}).get("trials") or 1))
    pairs = []
    for index, slot in enumerate(frozen.get("slots") or []):
        value = slot.get("input") or {}
        for trial in range(1, trials + 1):
            candidate = _side(*_replayed(entity, value, head, ref, number, now), cycle.judge)
            baseline = check.frozen_side(slot) or _side(*_replayed(entity, value, base, "", number, now), cycle.judge)
            pairs.append(check.slot_pair(slot, index, trial, baseline, candidate))
    verdict = check.judge_pairs(cycle, pairs)
    record = check.record(cycle, SimpleNamespace(checked_sha=head), pairs, verdict, now)
    return EntityAnswer(entity, verdict.verdict, verdict.reason, record)


def check_pr(number: int, *, by: str, now: datetime | None = None) -> PullCheck:
    """Check PR ``number`` for every loop entity it changes; post the status and the comment; return the record."""
    from evolution.forges import ForgeError

    now = now or timezone.now()
    forge = get_forge()
    try:
        pull = forge.get_pull(number)
    except ForgeError as exc:
        raise PullCheckError(f"PR #{number}: {exc}") from exc
    if pull.state != "open":
        raise PullCheckError(f"PR #{number} is {pull.state}: only an open pull request is checked")
    base = freeze.base_commit(forge=forge)
    entities = entities_changed(changed_files(base, pull.head_sha, pull.head))
    answers = [check_entity(e, number=number, head=pull.head_sha, ref=pull.head, base=base, now=now) for e in entities]
    if answers:
        worst = min(answers, key=lambda a: WORST.index(a.verdict) if a.verdict in WORST else 1)
        verdict, reason = worst.verdict, f"{worst.entity.name or worst.entity.slug}: {worst.reason}"
        state = STATES.get(verdict, "error")
    else:
        verdict, reason, state = "none", "no entity in the loop has files this PR changes", "success"
    forge.set_status(pull.head_sha, VALIDATION, state, check.description(f"{verdict.capitalize()}: {reason}"))
    body = render_to_string(
        "evolution/pr_check_comment.md",
        {
            "verdict": verdict,
            "reason": reason,
            "sections": [_section(a) for a in answers],
            "head": pull.head_sha,
            "base": base,
        },
    )
    forge.comment(number, fit(body, rest=""), by=by)
    checked = PullCheck.objects.create(
        number=number,
        head_sha=pull.head_sha,
        base_sha=base,
        requested_by=by,
        verdict=verdict,
        reason=reason,
        entities=[
            {"entity": f"{a.entity.target_kind}:{a.entity.slug}", "name": a.entity.name or a.entity.slug, **a.record}
            for a in answers
        ],
        touched=" " + " ".join(f"{a.entity.target_kind}:{a.entity.slug}" for a in answers) + " ",
        created_at=now,
    )
    emit(
        "check.answered",
        key=f"pr:{checked.pk}",
        title=f"PR #{number}: the pre-merge check answered {verdict}",
        text=reason,
        url=pull.url,
        pr=number,
        verdict=verdict,
    )
    return checked


def _words(side: dict[str, Any]) -> str:
    return P.STATE_WORDS.get(side.get("state"), str(side.get("state")))


def _section(answer: EntityAnswer) -> dict[str, Any]:
    """One entity's part of the comment: its answer and each pair as a row (input, incumbent, candidate)."""
    rows = [
        ((p.get("label") or p.get("source") or "").replace("|", "\\|"), _words(p["baseline"]), _words(p["challenger"]))
        for p in answer.record.get("pairs") or []
    ]
    return {
        "name": answer.entity.name or answer.entity.slug,
        "verdict": answer.verdict,
        "reason": answer.reason,
        "rows": rows,
    }


def check_if_persons(number: int) -> str:
    """What a pull request event asks (``LOOP_CHECK_PULLS``): the check of a PR the loop did not open; the verdict."""
    from django.db.models import Q

    from evolution.models import Round

    if Round.objects.filter(Q(pr_number=number) | Q(revert_pr_number=number)).exists():
        return "the loop's own: its cycle checks it"
    return check_pr(number, by="a pull_request event").verdict


def latest(number: int) -> PullCheck | None:
    return PullCheck.objects.filter(number=number).order_by("-created_at").first()
