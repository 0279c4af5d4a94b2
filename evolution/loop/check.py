"""The pre-merge check: replay the candidate and the incumbent on the frozen inputs, judge the pairs, speak on the PR.

Seed 003, "What the check does". Once the apply PR of a cycle with a frozen
set is open, and before anyone merges it:

1. ``begin`` pins the head (``checked_sha``), sets ``singularity/validation``
   pending on it, and creates the replays — ``trials`` candidate runs at the
   head for every frozen input, ``trials`` incumbent runs at the frozen base for
   every input without a comparable score — their execution ids on the round
   (``check_run_ids``, ``baseline_run_ids``) before the wait opens. The machine
   starts each on a worker (``run``); a replay nobody started, or whose worker
   died, is due again (``due_replays``, swept on the clock).
2. ``evaluate`` waits for every side's grade up to ``check.deadlineHours``
   (a candidate that could not even start is read at once as the change
   failing that run), then answers over the pairs: the judge's health and the
   bar first, then the entity's ``verdict(spec, pairs)``, the project's
   (``LOOP_VERDICT``) or the engine's rules (``evolution.presets.pairs``). A
   verdict function that will not load or throws makes the check inconclusive.
3. What the answer does is the machine's (``Answered``): regressed closes the
   PR (``failure``), validated lets the merge gate proceed (``success``), an
   unvalidated or inconclusive one (``error``) follows
   ``autonomy.onInconclusive`` — a person's merge, ``ship`` (``success`` "by
   policy") or ``close``.

The record (``check_verdict``) is stored verbatim on the round: the verdict,
the rule that answered, the reason ending "held-out k of n", per-metric and
per-input readings, the pairs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.module_loading import import_string

from evolution.core import notify as outbound
from evolution.core.polling import FIRST_INTERVAL_S, back_off, read_or_wait, wait_out
from evolution.forges import rate_limit
from evolution.forges.base import STATUS_FIX, fit
from evolution.loop import freeze as freezing
from evolution.loop.steps import Move, Settle
from evolution.models import Cycle, Replay, Round
from evolution.presets import pairs as P
from evolution.presets.base import ComparatorFault
from evolution.steering import autonomy
from grading.models import Execution, Grade
from grading.pin import comparable

log = logging.getLogger(__name__)

#: How long a worker holds a replay it took before the sweep hands it to another.
LEASE = timedelta(minutes=15)
#: A replay nobody took this long after it was created is started again by the sweep.
UNTAKEN_AFTER = timedelta(minutes=2)
#: GitHub keeps a commit status's description to 140 characters.
DESCRIPTION_CHARS = 140

VALIDATED, REGRESSED, UNVALIDATED = "validated", "regressed", "unvalidated"
HUMAN, SHIP, CLOSE = "human", "ship", "close"


def description(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= DESCRIPTION_CHARS else text[: DESCRIPTION_CHARS - 1] + "…"


def _forge() -> Any:
    from evolution.forges import get_forge

    return get_forge()


def needed(cycle: Cycle) -> bool:
    """Whether the cycle's PR is checked before any merge: it froze a set with at least one input."""
    frozen = cycle.frozen or {}
    return frozen.get("mode") == freezing.REPLAY and bool(frozen.get("slots"))


def trials_of(cycle: Cycle) -> int:
    return max(1, min(3, int(((cycle.frozen or {}).get("terms") or {}).get("trials") or 1)))


def deadline_hours(cycle: Cycle) -> float:
    """``check.deadlineHours`` as the entity's terms hold it when the check starts (read once)."""
    return float(freezing.check_terms(cycle.entity).get("deadlineHours") or 24)


# --- 1. Begin ----------------------------------------------------------------------------------------


def no_check(rnd: Round) -> str:
    """A PR with no pre-merge check says so on ``singularity/validation`` (a required status then holds nothing back).

    Returns "" once posted, else what went wrong (recorded on the round; the merge gate is then a person's).
    """
    cycle = rnd.cycle
    why = "no pre-merge check: this entity is judged by the watch after the merge"
    if cycle.frozen is not None and not (cycle.frozen or {}).get("slots"):
        why = "no pre-merge check: the cycle froze no inputs (no graded runs, no golden cases)"
    said = _post(rnd.head_sha, "success", why, cycle_id=rnd.cycle_id)
    if said:
        Round.objects.filter(pk=rnd.pk).update(gate_note=f"{said} ({STATUS_FIX})")
    return said


def begin(rnd: Round, now: datetime) -> tuple[Move, list[int]]:
    """Pin the head, set the status pending, create every replay; return the move to ``checking`` and the replays."""
    from grading.replays import prepare_many

    cycle = rnd.cycle
    entity = cycle.entity
    frozen = cycle.frozen or {}
    trials = trials_of(cycle)
    slots = list(frozen.get("slots") or [])
    base = str(frozen.get("baseSha") or rnd.base_sha)
    head = rnd.head_sha
    # Every side to replay: (side, slot, trial, commit), the candidate's first, then the incumbent's.
    wanted = [(Replay.Side.CANDIDATE, i, t, head) for i in range(len(slots)) for t in range(1, trials + 1)]
    wanted += [
        (Replay.Side.INCUMBENT, i, t, base)
        for i, slot in enumerate(slots)
        if slot.get("score") is None
        for t in range(1, trials + 1)
    ]
    with transaction.atomic():
        executions = prepare_many(
            entity, [(slots[i].get("input") or {}, commit) for _, i, _, commit in wanted], now=now
        )
        replays = [
            Replay(round=rnd, side=side, slot=i, trial=t, commit=commit, execution=execution)
            for (side, i, t, commit), execution in zip(wanted, executions, strict=True)
        ]
        Replay.objects.bulk_create(replays)
        candidates = [str(r.execution_id) for r in replays if r.side == Replay.Side.CANDIDATE]
        incumbents = [str(r.execution_id) for r in replays if r.side == Replay.Side.INCUMBENT]
        rnd.checked_sha = head
        rnd.check_run_ids = candidates
        rnd.baseline_run_ids = incumbents
        rnd.check_verdict = None
        rnd.save(update_fields=["checked_sha", "check_run_ids", "baseline_run_ids", "check_verdict"])
    held = freezing.held_out_text(frozen)
    rnd.checked_sha = head
    _status(
        rnd,
        "pending",
        f"The pre-merge check replays {len(slots)} input(s) × {trials} ({held}); waiting for the grades",
    )
    log.info(
        "loop: cycle %s round %s: the check replays %d candidate and %d incumbent run(s) on %s",
        cycle.pk,
        rnd.number,
        len(candidates),
        len(incumbents),
        head[:12],
    )
    ids = list(Replay.objects.filter(round=rnd).order_by("pk").values_list("pk", flat=True))
    return (
        Move(
            Cycle.Phase.CHECKING,
            {
                "check_deadline": now + timedelta(hours=deadline_hours(cycle)),
                "next_poll_at": now + timedelta(seconds=FIRST_INTERVAL_S),
                "poll_interval_s": FIRST_INTERVAL_S,
            },
            at=now,
        ),
        ids,
    )


# --- Running one replay ------------------------------------------------------------------------------


def take(replay_id: int, now: datetime) -> Replay | None:
    """Take replay ``replay_id`` for this worker (a conditional update); None when it is done or someone holds it."""
    taken = (
        Replay.objects.filter(pk=replay_id, finished_at=None, round__cycle__phase=Cycle.Phase.CHECKING)
        .filter(Q(started_at=None) | Q(started_at__lt=now - LEASE))
        .update(started_at=now)
    )
    if not taken:
        return None
    return Replay.objects.select_related("round", "round__cycle", "execution", "execution__entity").get(pk=replay_id)


def run(replay_id: int, *, now: datetime | None = None) -> Replay | None:
    """Run one replay at its commit (it acts on nothing); return it, or None when it was not this worker's to run."""
    from grading.replays import run_replay

    now = now or timezone.now()
    replay = take(replay_id, now)
    if replay is None or replay.execution is None:
        return None
    ref = replay.round.branch if replay.side == Replay.Side.CANDIDATE else ""
    try:
        execution = run_replay(replay.execution, ref=ref)
    finally:
        Replay.objects.filter(pk=replay.pk).update(finished_at=timezone.now())
    book(execution, replay.round.cycle_id)
    return replay


def book(execution: Execution, cycle_id: int) -> None:
    """Book a finished replay's grading, due at once, under the cycle's judge (a replay is never sampled)."""
    from grading.booking import GradingOff, book_exempt

    if execution.status != Execution.Status.SUCCEEDED:
        return  # a replay that died is read as the change failing that run; nobody grades it
    try:
        book_exempt(execution, f"check:{cycle_id}")
    except GradingOff as exc:
        log.warning("loop: cycle %s: replay %s cannot be graded: %s", cycle_id, execution.pk, exc)


def book_missing() -> int:
    """Book the finished replays of checking cycles that have no grade yet (a worker died between run and booking)."""
    missing = list(
        Replay.objects.filter(
            round__cycle__phase=Cycle.Phase.CHECKING,
            execution__status=Execution.Status.SUCCEEDED,
            execution__grade__isnull=True,
        ).select_related("execution", "execution__entity", "round")[:500]
    )
    for replay in missing:
        book(replay.execution, replay.round.cycle_id)
    return len(missing)


def due_replays(now: datetime) -> list[int]:
    """Replays of checking cycles nobody started in time, or whose worker's hold ran out (the sweep starts them)."""
    return list(
        Replay.objects.filter(round__cycle__phase=Cycle.Phase.CHECKING, finished_at=None)
        .filter(Q(started_at=None, created_at__lt=now - UNTAKEN_AFTER) | Q(started_at__lt=now - LEASE))
        .filter(Q(execution=None) | Q(execution__status=Execution.Status.RUNNING))
        .order_by("pk")
        .values_list("pk", flat=True)[:500]
    )


def frozen_judge(grade: Grade) -> dict[str, Any] | None:
    """The judge a replay's cycle pinned, when ``grade`` is of one of the check's replays; else None.

    A run the loop did not launch is never a replay: no query is made for it when its execution is loaded.
    """
    loaded = grade._state.fields_cache.get("execution")
    if loaded is not None and not loaded.loop_launched:
        return None
    judge = Replay.objects.filter(execution_id=grade.execution_id).values_list("round__cycle__judge", flat=True).first()
    return dict(judge) if judge else None


def cycles_of(execution_ids: list[Any]) -> list[int]:
    """The checking cycles whose replays are among ``execution_ids``."""
    return sorted(
        set(
            Replay.objects.filter(
                execution_id__in=list(execution_ids), round__cycle__phase=Cycle.Phase.CHECKING
            ).values_list("round__cycle_id", flat=True)
        )
    )


# --- 2. The pairs -----------------------------------------------------------------------------------


def checking_round(cycle: Cycle) -> Round | None:
    return cycle.rounds.exclude(checked_sha="").filter(status=Round.Status.APPLIED).order_by("-number").first()


def _side(execution: Execution | None, grade: Grade | None, judge: dict[str, Any]) -> P.Side:
    if execution is None:
        return P.Side(P.NOT_RUN)
    run_id = str(execution.pk)
    if execution.status == Execution.Status.RUNNING:
        return P.Side(P.UNFINISHED, run_id=run_id)
    if execution.status == Execution.Status.FAILED:
        return P.Side(P.NOT_RUN, run_id=run_id)
    if grade is None or grade.status in (Grade.Status.BOOKED, Grade.Status.GRADING):
        return P.Side(P.UNFINISHED, run_id=run_id)
    if grade.status != Grade.Status.GRADED or not comparable(grade.judge, judge):
        return P.Side(P.UNGRADED, run_id=run_id)
    state = P.VIABLE if grade.passed else P.FAILED
    return P.Side(state, vector=dict(grade.metrics or {}), run_id=run_id)


def read_pairs(cycle: Cycle, rnd: Round) -> list[P.Pair]:
    """The check's pairs, one per frozen input and trial, each side read as it stands now (three queries)."""
    frozen = cycle.frozen or {}
    judge = dict(cycle.judge or {})
    slots = list(frozen.get("slots") or [])
    replays = list(Replay.objects.filter(round=rnd).select_related("execution"))
    grades = {
        g.execution_id: g
        for g in Grade.objects.filter(execution_id__in=[r.execution_id for r in replays if r.execution_id])
    }
    sides: dict[tuple[str, int, int], P.Side] = {}
    for replay in replays:
        grade = grades.get(replay.execution_id) if replay.execution_id else None
        sides[(replay.side, replay.slot, replay.trial)] = _side(replay.execution, grade, judge)
    pairs = []
    for index, slot in enumerate(slots):
        for trial in range(1, trials_of(cycle) + 1):
            candidate = sides.get((Replay.Side.CANDIDATE, index, trial), P.Side(P.UNFINISHED))
            baseline = frozen_side(slot) or sides.get((Replay.Side.INCUMBENT, index, trial), P.Side(P.UNFINISHED))
            pairs.append(slot_pair(slot, index, trial, baseline, candidate))
    return pairs


def frozen_side(slot: dict[str, Any]) -> P.Side | None:
    """The incumbent's side a frozen slot already holds (its recorded score), or None: the incumbent is replayed."""
    score = slot.get("score")
    if score is None:
        return None
    state = P.VIABLE if score.get("passed") else P.FAILED
    return P.Side(state, vector=dict(score.get("vector") or {}), run_id=slot.get("runId"), frozen=True)


def slot_pair(slot: dict[str, Any], index: int, trial: int, baseline: P.Side, candidate: P.Side) -> P.Pair:
    """The pair of frozen slot ``index``'s trial: its two sides, named and labelled as the slot says."""
    return P.Pair(
        slot=index,
        trial=trial,
        source=f"run {slot['runId']}" if slot.get("runId") else f"case {slot.get('caseId')}",
        label=str(slot.get("label") or ""),
        held_out=bool(slot.get("heldOut")),
        golden=slot.get("kind") == "case",
        input=slot.get("input"),
        baseline=baseline,
        candidate=candidate,
    )


# --- 2b. The verdict --------------------------------------------------------------------------------


def _max_share(cycle: Cycle) -> Decimal:
    judge = ((cycle.entity.terms or {}).get("evaluation") or {}).get("judge") or {}
    value = judge.get("maxUngradedShare")
    return Decimal(str(value)) if value is not None else Decimal("0.34")


def _verdict_function(cycle: Cycle) -> tuple[str, Any]:
    """The entity's ``verdict`` (its loop module), else the project's ``LOOP_VERDICT``, else the engine's rules."""
    from evolution.presets.resolve import checked_module_function

    function = checked_module_function(cycle.entity, "verdict")
    if function is not None:
        return "module", function
    path = getattr(settings, "LOOP_VERDICT", "")
    if path:
        try:
            return "project", import_string(path)
        except ImportError as exc:
            raise ComparatorFault(f"LOOP_VERDICT {path!r} cannot be imported: {exc}") from exc
    return "engine", None


def _under_deadline(path: str) -> Any:
    """How a brain's verdict() is called: under the deadline for brain code, a hang that function's error, named."""
    from singularity.brain.deadline import call

    return lambda function, *args: call(function, *args, path=path, name="verdict")


def judge_pairs(cycle: Cycle, pairs: list[P.Pair]) -> P.Verdict:
    """The verdict over ``pairs``: health first, then the comparator; a brain comparator that fails is inconclusive."""
    sick = P.health(pairs, max_ungraded_share=_max_share(cycle))
    held = freezing.held_out_text(cycle.frozen)
    if sick is not None:
        sick.reason = f"{sick.reason}; {held}" if held else sick.reason
        return sick
    terms = cycle.entity.terms or {}
    try:
        which, function = _verdict_function(cycle)
        if function is None:
            return P.engine_verdict(terms, pairs, held_out=held)
        spec = {"metrics": (terms.get("evaluation") or {}).get("metrics") or {}, "heldOut": held}
        path = cycle.entity.loop_module_path if which == "module" else "LOOP_VERDICT"
        answer = P.brain_verdict(function, spec, pairs, which=which, call=_under_deadline(path))
    except (ComparatorFault, P.VerdictFault) as fault:
        return P.Verdict(UNVALIDATED, f"inconclusive: {fault}", rule="fault", inconclusive=True)
    if held and held not in answer.reason:
        answer.reason = f"{answer.reason}; {held}" if answer.reason else held
    return answer


def power_of(cycle: Cycle, pairs: list[P.Pair], verdict: P.Verdict) -> dict[str, Any]:
    """How much the check could have seen (``evolution.presets.power``); a validated verdict on seen inputs only
    says so in its reason too."""
    from evolution.presets import power

    stated = power.check_power(cycle.entity.terms or {}, pairs, verdict, cycle.frozen)
    if verdict.verdict == VALIDATED and stated["seenOnly"] and power.SEEN_ONLY not in verdict.reason:
        verdict.reason = f"{verdict.reason}; {power.SEEN_ONLY}" if verdict.reason else power.SEEN_ONLY
    return stated


def record(cycle: Cycle, rnd: Round, pairs: list[P.Pair], verdict: P.Verdict, now: datetime) -> dict[str, Any]:
    stated = power_of(cycle, pairs, verdict)
    return {
        "power": stated,
        "verdict": verdict.verdict,
        "inconclusive": verdict.inconclusive,
        "rule": verdict.rule,
        "reason": verdict.reason,
        "perMetric": verdict.per_metric,
        "perInput": verdict.per_input,
        "heldOut": (cycle.frozen or {}).get("heldOut"),
        "checkedSha": rnd.checked_sha,
        "baseSha": (cycle.frozen or {}).get("baseSha"),
        "pairs": [p.as_json() for p in pairs],
        "judged": sum(p.judged for p in pairs),
        "answeredAt": now.isoformat(),
    }


@dataclass(frozen=True)
class Answered:
    """What the check's answer asks of the machine: settle, or go on to the merge gate (``demote``: a person's merge)."""

    verdict: str
    reason: str
    settle: Settle | None = None
    demote: str = ""


def _post(sha: str, state: str, text: str, *, cycle_id: int) -> str:
    """Set ``singularity/validation`` on ``sha``; "" when posted, else what went wrong (never raised).

    A post the forge refuses (a 403: the credential may no longer post
    statuses, R12.15) or cannot make is not silent: a notice says so at once,
    with the credential's fix, and the caller records it on the round; the
    check never answers validated while its status could not be posted.
    """
    from evolution.forges import ForgeError
    from evolution.forges.base import VALIDATION
    from singularity.errors import SingularityError

    try:
        _forge().set_status(sha, VALIDATION, state, description(text))
    except (ForgeError, SingularityError) as exc:
        log.warning("loop: cycle %s: singularity/validation could not be set to %s: %s", cycle_id, state, exc)
        said = f"singularity/validation could not be set to {state} on {sha[:12]}: {exc}"
        _status_refused(cycle_id, said)
        return said
    return ""


def _status_refused(cycle_id: int, said: str) -> None:
    from hitl.actions import post_notice

    cycle = Cycle.objects.select_related("entity").filter(pk=cycle_id).first()
    name = (cycle.entity.name or cycle.entity.slug) if cycle is not None else "the loop"
    post_notice(
        producer="loop",
        kind="status-refused",
        title=f"{name}: cycle {cycle_id}: a commit status could not be posted",
        text=f"{said}. GitHub still shows the status as it was. To fix: {STATUS_FIX}.",
        subject=f"cycle {cycle_id}",
    )


def _status(rnd: Round, state: str, text: str) -> str:
    said = _post(rnd.checked_sha, state, text, cycle_id=rnd.cycle_id)
    if said:
        note = f"{said} ({STATUS_FIX})"
        Round.objects.filter(pk=rnd.pk).update(gate_note=note)
        rnd.gate_note = note
    return said


def comment_body(cycle: Cycle, rnd: Round) -> str:
    """The check's record as the comment it leaves on a PR it closed (Markdown: the answer, then each input)."""
    from django.conf import settings

    record = rnd.check_verdict or {}
    lines = [
        f"**The pre-merge check {record.get('verdict') or 'answered'}** — {record.get('reason') or ''}",
        "",
        f"The candidate (this PR's head `{rnd.checked_sha[:12]}`) and the incumbent (base "
        f"`{str(record.get('baseSha') or '')[:12]}`) were replayed on the cycle's frozen inputs:",
        "",
        "| frozen input | incumbent | candidate | |",
        "|---|---|---|---|",
    ]
    for row in record.get("perInput") or []:
        label = str(row.get("label") or row.get("source") or "").replace("|", "\\|")
        marks = " ".join(m for m, on in (("held out", row.get("heldOut")), ("lost", row.get("lost"))) if on)
        incumbent = ", ".join(P.STATE_WORDS.get(s, s) for s in row.get("incumbent") or [])
        candidate = ", ".join(P.STATE_WORDS.get(s, s) for s in row.get("candidate") or [])
        lines.append(f"| {label} | {incumbent} | {candidate} | {marks} |")
    link = settings.SINGULARITY_PUBLIC_URL.rstrip("/") + cycle.get_absolute_url()
    stated = (record.get("power") or {}).get("words")
    if stated:
        lines += ["", f"What this check could see: {stated}."]
    lines += ["", f"Nothing shipped. The whole record: cycle {cycle.pk}, {link}"]
    return fit("\n".join(lines) + "\n", rest=link)


def _close(rnd: Round, cycle: Cycle) -> str:
    from evolution.forges import ForgeError
    from singularity.errors import SingularityError

    forge = _forge()
    try:
        if hasattr(forge, "disarm_auto_merge"):
            forge.disarm_auto_merge(rnd.pr_number)
        forge.close_pull(rnd.pr_number, by=cycle.actor)
    except ForgeError as exc:
        log.warning("loop: cycle %s: PR #%s could not be closed: %s", cycle.pk, rnd.pr_number, exc)
        return f" (closing it failed: {exc})"
    Round.objects.filter(pk=rnd.pk).update(status=Round.Status.CLOSED)
    try:
        forge.comment(rnd.pr_number, comment_body(cycle, rnd), by=cycle.actor)
    except (ForgeError, SingularityError) as exc:  # the status and the cycle's story carry the record anyway
        log.warning("loop: cycle %s: the check's record could not be left on PR #%s: %s", cycle.pk, rnd.pr_number, exc)
    except Exception:  # noqa: BLE001 - a comment is a courtesy: a client bug must not undo the closed PR's settle
        log.exception("loop: cycle %s: leaving the check's record on PR #%s broke", cycle.pk, rnd.pr_number)
    return ""


def on_inconclusive(cycle: Cycle) -> str:
    """``autonomy.onInconclusive``: human (default), ship or close."""
    value = autonomy.policy(cycle.entity).get("onInconclusive") or HUMAN
    return value if value in (HUMAN, SHIP, CLOSE) else HUMAN


def answer(cycle: Cycle, rnd: Round, verdict: P.Verdict, pairs: list[P.Pair], now: datetime) -> Answered:
    """Store the check's record, speak on the PR and say what the machine does next."""
    kept = record(cycle, rnd, pairs, verdict, now)
    policy = on_inconclusive(cycle) if verdict.verdict == UNVALIDATED else ""
    kept["onInconclusive"] = policy or None
    if policy == SHIP:
        kept["shippedByPolicy"] = True
    Round.objects.filter(pk=rnd.pk).update(check_verdict=kept)
    rnd.check_verdict = kept
    log.info(
        "loop: cycle %s round %s: the check answered %s: %s", cycle.pk, rnd.number, verdict.verdict, verdict.reason
    )
    outbound.check_answered(cycle, rnd, verdict.verdict, verdict.reason)
    if verdict.verdict == REGRESSED:
        _status(rnd, "failure", f"Regressed: {verdict.reason}")
        closed = _close(rnd, cycle)
        return Answered(
            REGRESSED,
            verdict.reason,
            settle=Settle(
                Cycle.Status.REGRESSED,
                f"the pre-merge check regressed PR #{rnd.pr_number}, which the loop closed unmerged (nothing shipped): "
                f"{verdict.reason}{closed}",
            ),
        )
    if verdict.verdict == VALIDATED:
        unposted = _status(rnd, "success", f"Validated: {verdict.reason}")
        if unposted:  # GitHub still shows it pending: the check does not answer validated, a person decides
            return Answered(UNVALIDATED, verdict.reason, demote=f"the check validated it, but {unposted}")
        return Answered(VALIDATED, verdict.reason)
    word = "inconclusive" if verdict.inconclusive else "unvalidated"
    if policy == SHIP:
        unposted = _status(
            rnd, "success", f"{word}; merged without proof by policy (autonomy.onInconclusive: ship): {verdict.reason}"
        )
        if unposted:
            return Answered(UNVALIDATED, verdict.reason, demote=f"shipping it by policy failed: {unposted}")
        return Answered(UNVALIDATED, verdict.reason)
    _status(rnd, "error", f"{word.capitalize()}: {verdict.reason}")
    if policy == CLOSE:
        closed = _close(rnd, cycle)
        return Answered(
            UNVALIDATED,
            verdict.reason,
            settle=Settle(
                Cycle.Status.UNVALIDATED,
                f"the pre-merge check could not show the change works ({verdict.reason}); autonomy.onInconclusive: "
                f"close closed PR #{rnd.pr_number}{closed}",
            ),
        )
    return Answered(
        UNVALIDATED,
        verdict.reason,
        demote=f"the pre-merge check was {word} ({verdict.reason}): a person decides whether it merges",
    )


def vouchable(rnd: Round) -> bool:
    """Whether a person may merge ``rnd``'s PR on their word: its check answered unvalidated under ``human``."""
    record = rnd.check_verdict if isinstance(rnd.check_verdict, dict) else {}
    return (
        rnd.status == Round.Status.APPLIED
        and bool(rnd.checked_sha)
        and record.get("verdict") == UNVALIDATED
        and record.get("onInconclusive") == HUMAN
    )


def vouch(rnd: Round, *, by: str, now: datetime) -> None:
    """A person's "merge anyway": ``success`` on the checked commit, on their word, kept on the check's record.

    The check itself is not rewritten: its verdict stays unvalidated; the record says who merged it without proof.
    """
    record = dict(rnd.check_verdict or {})
    record["mergedOnWordOf"] = by
    record["vouchedAt"] = now.isoformat()
    Round.objects.filter(pk=rnd.pk).update(check_verdict=record)
    rnd.check_verdict = record
    word = "inconclusive" if record.get("inconclusive") else "unvalidated"
    _status(rnd, "success", f"{word}; merged on {by}'s word: {record.get('reason') or ''}")


def evaluate(cycle: Cycle, now: datetime) -> Answered | None:
    """Read the check of ``cycle`` once (the caller holds the row); its answer, or None while it waits."""
    rnd = checking_round(cycle)
    if rnd is None:
        return Answered(UNVALIDATED, "", settle=Settle(Cycle.Status.FAILED, "the check found no round with an open PR"))
    closing = cycle.check_deadline is not None and now >= cycle.check_deadline
    limit = rate_limit()
    if limit is not None:  # its answer is posted on GitHub: it waits for the reset, then answers
        wait_out(cycle, limit[0])
        return None
    pairs = read_pairs(cycle, rnd)
    waiting = any(P.UNFINISHED in (p.candidate.state, p.baseline.state) for p in pairs)
    if waiting and not closing:
        return None
    verdict = judge_pairs(cycle, pairs)
    if waiting:
        verdict.reason = f"{verdict.reason} (the check's deadline passed with replays unfinished)"
    return answer(cycle, rnd, verdict, pairs, now)


def poll(cycle: Cycle, now: datetime) -> Settle | Move | None:
    """Read the PR while its check waits: a PR merged or closed meanwhile ends the check; else back off."""
    rnd = checking_round(cycle)
    if rnd is None:
        return Settle(Cycle.Status.FAILED, "the check found no round with an open PR")
    pull = read_or_wait(_forge(), cycle, rnd.pr_number)
    if pull is None:
        return None
    if pull.state == "closed":
        Round.objects.filter(pk=rnd.pk).update(status=Round.Status.CLOSED)
        return Settle(Cycle.Status.UNVALIDATED, f"PR #{pull.number} was closed unmerged while its check ran")
    if pull.state == "merged":
        merged_at = pull.merged_at or now
        note = {"verdict": None, "reason": "merged before the pre-merge check answered", "answeredAt": None}
        Round.objects.filter(pk=rnd.pk).update(merge_sha=pull.merge_sha, status=Round.Status.MERGED, check_verdict=note)
        Cycle.objects.filter(pk=cycle.pk).update(merged_at=merged_at, next_poll_at=None)
        cycle.merged_at, cycle.next_poll_at = merged_at, None
        return Move(Cycle.Phase.WATCHING, at=merged_at)
    back_off(cycle, now, deadline=cycle.check_deadline)
    return None
