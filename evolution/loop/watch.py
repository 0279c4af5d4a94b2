"""The watch: after the merge, the entity's own next graded runs say whether the change held (seed 003).

"How a cycle is judged" and "The watch — when the evidence never arrives".
The watch opens at the merge (``open_watch``) with its deadline counted from
it, and is asked again at every landed grade of the entity (``on_grades``)
and on the loop's clock (``tick``). Each time it reads the observed span —
every finished run of the entity that started since the merge and before the
deadline, never a loop replay, never a run still waiting for a rating, for a
chat role never an episode that ran under two role versions — and splits its
grades into three baskets:

- graded under the judge the cycle pinned (``grading.pin.comparable``): the
  window is the first ``watch.windowRuns`` of them, in the order they were
  graded (so a full window never changes);
- ungraded: gradings that failed, and grades made under another judge (or
  recording none) — they fill no slot and count toward judge health;
- not graded at all (sampled out, still booked): in neither.

Then one comparator answers, nearest first: the entity's ``compare(before,
after, terms)`` (or the project's ``LOOP_COMPARE``), else its
``should_open`` (or ``LOOP_SHOULD_OPEN``) asked at each grade of the window,
else the engine's count by the trigger's own rule: ``watch.minFailures`` bad
runs regress on the spot; a full window with fewer validates. A verdict is
withheld while the judge is unhealthy (``judge_unhealthy``), and the cycle
settles unvalidated on that instead. At the deadline a window that never got
a verdict settles unvalidated ("the watch closed short: …"). A comparator of
the brain's that throws, will not load or answers a shape the engine cannot
read settles unvalidated naming it, with no verdict record.

While the window is short and the deadline ahead, the entity's runs are
graded whatever the sample (``exempt``) and under the pinned judge
(``frozen_judge``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from evolution.loop.steps import Move, Settle
from evolution.models import Cycle
from evolution.presets.base import UNIT, Answer, Observed
from evolution.presets.readings import vectors_of
from grading.cards import observed
from grading.models import Entity, Execution, Grade
from grading.pin import comparable_text, judge_text

log = logging.getLogger(__name__)

#: The engine's default evaluation.judge.maxUngradedShare and watch.deadlineHours (DESIGN).
DEFAULT_MAX_UNGRADED = Decimal("0.34")
DEFAULT_DEADLINE_HOURS = 336
#: What the watch leaves unread of a window's runs: a window of a thousand runs is not a thousand traces.
HEAVY_RUN_FIELDS = ("execution__input", "execution__output", "execution__trace", "execution__error")


# --- Terms --------------------------------------------------------------------------------


def watch_terms(entity: Entity) -> dict[str, Any]:
    """Return the entity's resolved ``loop.watch`` block (empty when it has none)."""
    return dict(((entity.terms or {}).get("loop") or {}).get("watch") or {})


def sizes(entity: Entity) -> tuple[int, int]:
    """Return (windowRuns, minFailures) of the watch: the watch's own, else the trigger's (5 and 2 by default)."""
    loop = (entity.terms or {}).get("loop") or {}
    watch, trigger = loop.get("watch") or {}, loop.get("trigger") or {}
    need = watch.get("windowRuns") or trigger.get("windowRuns") or 5
    failures = watch.get("minFailures") or trigger.get("minFailures") or 2
    return int(need), int(failures)


def max_ungraded_share(entity: Entity) -> Decimal:
    """Return ``evaluation.judge.maxUngradedShare`` (manifest only; 0.34 by default)."""
    judge = ((entity.terms or {}).get("evaluation") or {}).get("judge") or {}
    value = judge.get("maxUngradedShare")
    return Decimal(str(value)) if value is not None else DEFAULT_MAX_UNGRADED


def _need(cycle: Cycle) -> tuple[int, int]:
    """Return the window size and minFailures the watch fixed when it opened (the terms' when it stored none)."""
    stored = cycle.watch_window or {}
    need, failures = sizes(cycle.entity)
    return int((stored.get("progress") or {}).get("need") or need), int(stored.get("minFailures") or failures)


# --- Opening ------------------------------------------------------------------------------


def open_watch(cycle: Cycle, now: datetime) -> Settle | Move:
    """Open the watch of a change merged at ``now``: Move to watching, or Settle at once under ``watch.mode: none``.

    The deadline is ``watch.deadlineHours`` from ``now``, read once here; the
    window size and minFailures are fixed here too. Under ``watch.mode:
    none`` the change shipped unwatched, by design, with no verdict record.
    """
    watch = watch_terms(cycle.entity)
    if watch.get("mode") == "none":
        return Settle(Cycle.Status.UNVALIDATED, "watch.mode is none: the change shipped unwatched, by design")
    need, failures = sizes(cycle.entity)
    hours = watch.get("deadlineHours")
    deadline = now + timedelta(hours=float(hours if hours is not None else DEFAULT_DEADLINE_HOURS))
    window = {
        "from": now.isoformat(),
        "to": deadline.isoformat(),
        "runIds": [],
        "reason": f"0 of {need} {UNIT}",
        "ready": False,
        "progress": {"have": 0, "need": need, "unit": UNIT},
        "minFailures": failures,
        "bad": 0,
        "ungraded": 0,
        "power": watch_power_of(cycle.entity, need, failures, before=now),
    }
    log.info("loop: cycle %s: watching %s until %s", cycle.pk, cycle.entity, deadline.isoformat())
    return Move(
        Cycle.Phase.WATCHING,
        {
            "watch_opened_at": now,
            "watch_deadline": deadline,
            "watch_window": window,
            "watch_tally": window["reason"],
            "next_poll_at": None,
        },
    )


# --- What the watch observes -----------------------------------------------------------


#: How many of the entity's own graded runs before the merge its failure rate is read over.
RATE_RUNS = 50


def failure_rate(entity: Entity, *, before: datetime, limit: int = RATE_RUNS) -> tuple[Decimal | None, int]:
    """The share of the entity's last ``limit`` graded runs before ``before`` that were bad by the trigger's rule,
    and how many runs it rests on; (None, 0) with none. The loop's own replays are not the entity's runs."""
    from grading.metrics import is_bad

    grades = list(
        Grade.objects.filter(
            entity=entity,
            status=Grade.Status.GRADED,
            execution__loop_launched=False,
            graded_at__lt=before,
        ).order_by("-graded_at")[:limit]
    )
    if not grades:
        return None, 0
    terms = entity.terms or {}
    bad = sum(1 for grade in grades if is_bad(grade, terms))
    return Decimal(bad) / Decimal(len(grades)), len(grades)


def watch_power_of(entity: Entity, need: int, failures: int, *, before: datetime) -> dict[str, Any]:
    """The watch's power, fixed when it opens: its window and count, and how often they would revert the entity as
    it ran before the change (``evolution.presets.power.watch_power``)."""
    from evolution.presets import power

    rate, over = failure_rate(entity, before=before)
    return power.watch_power(need, failures, rate, rated_over=over)


def span(cycle: Cycle, now: datetime) -> Any:
    """Return the executions the watch observes: the entity's own finished runs started since the merge.

    Never a loop replay, never a run started past the deadline, never one
    still waiting on a rating card; for a chat role never an episode that ran
    under two role versions.
    """
    runs = Execution.objects.filter(
        entity_id=cycle.entity_id, loop_launched=False, started_at__gte=cycle.watch_opened_at
    ).exclude(status=Execution.Status.RUNNING)
    if cycle.watch_deadline is not None:
        runs = runs.filter(started_at__lt=cycle.watch_deadline)
    stale = _before_the_change(cycle, runs)
    if stale:
        runs = runs.exclude(commit__in=stale)
    if cycle.entity.kind == Entity.Kind.ROLE:
        runs = runs.exclude(episode__mixed_versions=True)
    return observed(runs, now=now)


#: (checkout, merge, commit) → whether the commit contains the merge: two commit ids never change (answers only).
_CONTAINS: dict[tuple[str, str, str], bool] = {}


def _contains(checkout_path: str, merge_sha: str, commit: str) -> bool | None:
    """Whether ``commit`` contains ``merge_sha``; None when git cannot tell yet (asked again next time)."""
    from evolution.forges.git import is_ancestor
    from singularity.brain.git import GitError

    key = (checkout_path, merge_sha, commit)
    if key not in _CONTAINS:
        try:
            answer = is_ancestor(merge_sha, commit, cwd=checkout_path)
        except GitError:
            return None
        if len(_CONTAINS) > 4096:
            _CONTAINS.clear()
        _CONTAINS[key] = answer
    return _CONTAINS[key]


#: What the watch reads of the merged round: its commits and the files it landed (never its brief or diff text).
SHIPPED_FIELDS = ("id", "cycle_id", "number", "merge_sha", "base_sha", "head_sha", "files")


def shipped_round(cycle: Cycle) -> Any:
    """The cycle's merged round (its commits and files), read once per watch read of ``cycle``."""
    if "_shipped_round" not in cycle.__dict__:
        cycle.__dict__["_shipped_round"] = (
            cycle.rounds.exclude(merge_sha="").only(*SHIPPED_FIELDS).order_by("-number").first()
        )
    return cycle.__dict__["_shipped_round"]


def _before_the_change(cycle: Cycle, runs: Any) -> list[str]:
    """The commits among ``runs`` that do not contain the shipped change: runs on the old definition.

    A forge's merge time is to the second (GitHub's is) and a merge made outside the dashboard reaches the
    engine at its next sync, so a run started "since the merge" may still have run the old definition. Such a
    run is nobody's evidence about the change. A commit git cannot place is kept (the watch is never starved
    on a doubt); a run with no commit recorded (reported through the API) is kept.
    """
    from grading.sync import current_checkout

    shipped = shipped_round(cycle)
    if shipped is None or not shipped.merge_sha:
        return []
    # ``order_by()``: the run's default ordering would add its start to the DISTINCT (a row per run, not per commit).
    commits = {c for c in runs.order_by().values_list("commit", flat=True).distinct() if c and c != shipped.merge_sha}
    if not commits:
        return []
    checkout = current_checkout()
    _know(checkout, shipped.merge_sha)
    path = str(checkout.path)
    return sorted(c for c in commits if _contains(path, shipped.merge_sha, c) is False)


def _know(checkout: Any, sha: str) -> None:
    """Fetch the merge into the engine's clone when it is not there yet (the sync after a merge may lag)."""
    from django.conf import settings

    from grading.replays import ensure_commit
    from singularity.brain.git import GitError

    try:
        ensure_commit(checkout, sha, ref=settings.BRAIN_BRANCH)
    except GitError as exc:
        log.info("loop: the merge %s is not in the engine's clone yet: %s", sha[:12], exc)


def observe(cycle: Cycle, now: datetime) -> Observed:
    """Read the observed span's grades into the three baskets (see the module docstring).

    One read of the span in the window's order (graded, then the run's end, then its id), each grade's judge and
    metrics as their stored text: a judge is decoded once per distinct snapshot, a vector only for the window's
    runs. The window's grades themselves are read only when a comparator asks for them (``Observed.window``).
    """
    need, failures = _need(cycle)
    grades = Grade.objects.filter(execution__in=span(cycle, now), status__in=[Grade.Status.GRADED, Grade.Status.FAILED])
    if cycle.watch_deadline is not None:
        grades = grades.filter(Q(graded_at__lt=cycle.watch_deadline) | Q(graded_at=None))
    rows = grades.order_by("graded_at", "execution__completed_at", "execution_id").values_list(
        Cast("execution_id", TextField()), "status", judge_text(cycle.judge), Cast("metrics", TextField())
    )
    pinned: dict[str | None, bool] = {}
    first: list[str] = []
    texts: list[str] = []
    graded = ungraded = 0
    for execution_id, status, judge, metrics in rows:
        if status != Grade.Status.GRADED or not comparable_text(cycle.judge, judge, pinned):
            ungraded += 1
            continue
        graded += 1
        if len(first) < need:
            first.append(run_key(execution_id))
            texts.append(metrics or "{}")
    return Observed(
        run_ids=first,
        vectors=vectors_of(texts),
        graded=graded,
        ungraded=ungraded,
        need=need,
        min_failures=failures,
        load=lambda ids: window_grades(cycle, ids),
    )


def run_key(text: str) -> str:
    """A run id read as text, as the engine stores one (``str(uuid)``): SQLite keeps a UUID as its 32 hex digits."""
    if len(text) == 32:
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
    return text


def window_grades(cycle: Cycle, ids: list[Any]) -> list[Grade]:
    """The window's runs as grades in ``ids``' order, without their inputs, outputs and traces (read only if asked),
    each handed the cycle's own entity."""
    read = Grade.objects.select_related("execution").defer(*HEAVY_RUN_FIELDS).in_bulk(ids)
    by_id = {str(pk): grade for pk, grade in read.items()}
    window = [by_id[str(pk)] for pk in ids]
    for grade in window:
        grade.entity = cycle.entity
    return window


def judge_unhealthy(cycle: Cycle, seen: Observed, *, deciding: bool) -> str | None:
    """Return the "judge unhealthy" reason when the ungraded share is above maxUngradedShare, else None.

    The share is read once the span holds a window's worth of judged runs
    (graded + ungraded ≥ windowRuns), when a verdict is about to be given
    (``deciding``), or at the deadline (also ``deciding``) — never on the
    first lone failure, which would be a fifth of an answer.
    """
    ceiling = max_ungraded_share(cycle.entity)
    if not seen.judged or seen.share() <= ceiling:
        return None
    if not deciding and seen.judged < seen.need:
        return None
    share = seen.share().quantize(Decimal("0.01"))
    return (
        f"judge unhealthy: {seen.ungraded} of {seen.judged} runs of {cycle.entity} judged since the merge were not "
        f"graded under the pinned judge ({share} is above evaluation.judge.maxUngradedShare {ceiling})"
    )


# --- The record of the window ------------------------------------------------------------


def window_record(cycle: Cycle, seen: Observed, answer: Answer | None, which: str) -> dict[str, Any]:
    """The watch_window to store: the runs the answer rests on, oldest first, and the progress in graded runs."""
    runs = answer.run_ids if answer is not None else [str(run) for run in seen.run_ids]
    bad = answer.bad if answer is not None else None
    window = dict(cycle.watch_window or {})
    window.update(
        runIds=runs,
        reason=seen.tally(bad=bad),
        ready=seen.full,
        progress={"have": seen.have, "need": seen.need, "unit": UNIT},
        minFailures=seen.min_failures,
        ungraded=seen.ungraded,
        comparator=which,
    )
    if bad is not None:
        window["bad"] = bad
    if answer is not None and answer.asked is not None:
        window["asked"] = answer.asked
    return window


def store(cycle: Cycle, window: dict[str, Any]) -> None:
    if window != cycle.watch_window or window["reason"] != cycle.watch_tally:
        Cycle.objects.filter(pk=cycle.pk).update(watch_window=window, watch_tally=window["reason"][:200])
        cycle.watch_window, cycle.watch_tally = window, window["reason"][:200]


# --- What grading asks the watch ---------------------------------------------------------


def _short(cycle: Cycle, started_at: datetime | None, now: datetime) -> bool:
    """Whether a run started at ``started_at`` is a challenger of this watch: after the merge, window short, in time."""
    if cycle.watch_opened_at is None or started_at is None or started_at < cycle.watch_opened_at:
        return False
    if cycle.watch_deadline is not None and (now >= cycle.watch_deadline or started_at >= cycle.watch_deadline):
        return False
    progress = (cycle.watch_window or {}).get("progress") or {}
    need = progress.get("need") or sizes(cycle.entity)[0]
    have = progress.get("have")
    if have is None:
        have = len((cycle.watch_window or {}).get("runIds") or [])
    return int(have) < int(need)


def _watching(entity_id: Any) -> Cycle | None:
    """The entity's watching cycle, read once per grading batch (grading.scope) rather than once per run."""
    from grading import scope

    memo = scope.memo()
    key = ("loop:watching", entity_id)
    if memo is not None and key in memo:
        return memo[key]
    cycle = Cycle.objects.filter(phase=Cycle.Phase.WATCHING, entity_id=entity_id).select_related("entity").first()
    if memo is not None:
        memo[key] = cycle
    return cycle


def exempt(execution: Execution) -> str | None:
    """Return "watch:<cycle id>" when ``execution`` must be graded whatever the sample, else None.

    That is while its entity's watch is short of its window and before the
    deadline, for a run of the entity's own that started since the merge.
    """
    if execution.loop_launched:
        return None
    cycle = _watching(execution.entity_id)
    if cycle is None or not _short(cycle, execution.started_at, timezone.now()):
        return None
    return f"watch:{cycle.pk}"


def frozen_judge(grade: Grade) -> dict[str, Any] | None:
    """Return the judge the watching cycle pinned when ``grade`` is of one of its challengers, else None.

    A challenger is the entity's own run started since the merge, graded while
    the window is short and before the deadline.
    """
    cycle = _watching(grade.entity_id)
    if cycle is None or not cycle.judge:
        return None
    run = Execution.objects.filter(pk=grade.execution_id).values("started_at", "loop_launched").first()
    if run is None or run["loop_launched"] or not _short(cycle, run["started_at"], timezone.now()):
        return None
    return dict(cycle.judge)


# --- Edits nobody's loop made ---------------------------------------------------------------


def _own_paths(cycle: Cycle, rnd: Any) -> list[str]:
    """The entity's own files and every file its change landed."""
    entity = cycle.entity
    paths = {p for p in (entity.path, entity.pipeline_path, entity.loop_module_path) if p}
    paths |= {str(f.get("path")) for f in (rnd.files or []) if isinstance(f, dict) and f.get("path")}
    return sorted(paths)


def _only_loop_block(checkout: Any, sha: str, path: str) -> bool:
    """Whether commit ``sha`` changed nothing of ``path`` but its frontmatter's ``loop:`` block (steering, not the entity)."""
    from singularity.brain.frontmatter import FrontmatterError, parse
    from singularity.brain.git import GitError

    try:
        before = parse(checkout.read_at(f"{sha}^", path).decode("utf-8"), path=path)
        after = parse(checkout.read_at(sha, path).decode("utf-8"), path=path)
    except (GitError, FrontmatterError, UnicodeDecodeError):
        return False
    (front_before, body_before), (front_after, body_after) = before, after
    strip = lambda front: {k: v for k, v in (front or {}).items() if k != "loop"}  # noqa: E731
    return body_before == body_after and strip(front_before) == strip(front_after)


def edit_confound(cycle: Cycle, *, checkout: Any | None = None) -> dict[str, Any] | None:
    """A commit no cycle shipped that landed on the entity's files since the change was cut, or None.

    "Landed" is git reachability from the brain's synced head, not dates: commits reachable from the head and
    from neither the change's base nor its own branch, touching the entity's files or the files the change
    landed, other than this cycle's own merge. A commit that changed only the entity's ``loop:`` block does not
    confound (the loop's settings steer the loop); ``evaluation:`` and ``enabled:`` do.
    """
    from evolution.forges.git import is_ancestor
    from grading.methods import brain_checkout
    from singularity.brain.git import GitError, git

    rnd = shipped_round(cycle)
    if rnd is None or not rnd.merge_sha or not rnd.base_sha:
        return None
    repo = brain_checkout(checkout)
    try:
        head = repo.head()
        if not is_ancestor(rnd.merge_sha, head, cwd=repo.path):
            return None  # the merge has not reached this checkout yet: nothing after it can have landed
        excluded = [f"^{rnd.base_sha}"] + ([f"^{rnd.head_sha}"] if rnd.head_sha else [])
        paths = _own_paths(cycle, rnd)
        listed = git("rev-list", "--reverse", head, *excluded, "--", *paths, cwd=repo.path).decode().split()
        for sha in listed:
            if sha == rnd.merge_sha:
                continue
            files = [
                f
                for f in git("diff-tree", "--no-commit-id", "--name-only", "-r", sha, "--", *paths, cwd=repo.path)
                .decode()
                .split("\n")
                if f
            ]
            if not files:
                continue
            if files == [cycle.entity.path] and _only_loop_block(repo, sha, cycle.entity.path):
                continue
            author, _, subject = (
                git("log", "-1", "--format=%an%x00%s", sha, cwd=repo.path).decode().strip().partition("\0")
            )
            return {"sha": sha, "author": author, "subject": subject, "files": files}
    except GitError as exc:
        log.warning("loop: cycle %s: the watch could not read the brain's history for edits: %s", cycle.pk, exc)
    return None
