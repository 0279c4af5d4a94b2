"""The trigger's batch path (issue 18): the gates read once per batch, each entity's refusals folded once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.core import cycles
from evolution.loop import opening, trigger
from evolution.models import Cycle, Supervision
from grading.metrics import is_bad
from grading.models import Grade
from tests.evolution.loop_helpers import graded, history, looped, settled_cycle

pytestmark = pytest.mark.django_db


def bad_landings(entities, n: int) -> list:
    """``n`` bad grades on each entity, interleaved, a millisecond apart (the newest last)."""
    at = timezone.now()
    landed = []
    for k in range(n):
        for i, entity in enumerate(entities):
            landed.append(graded(entity, bad=True, at=at + timedelta(milliseconds=k * 10 + i)).pk)
    return landed


def refusal_rows(entity) -> list[tuple[str, int]]:
    return list(
        Cycle.objects.filter(entity=entity, analysed=False, status=Cycle.Status.SKIPPED)
        .order_by("id")
        .values_list("reason", "refusals")
    )


def test_a_batch_refuses_each_entity_as_one_landing_alone_would_and_folds_its_refusals_once():
    resting, held, free = looped("resting"), looped("held"), looped("free")
    capped = looped("capped", loop={"maxAnalysesPerDay": 1, "cooldownHours": 0})
    for entity in (resting, held, free, capped):
        history(entity, "bggg", start=timezone.now() - timedelta(hours=3))
    settled_cycle(resting, Cycle.Status.VALIDATED, at=timezone.now() - timedelta(hours=1))
    settled_cycle(capped, Cycle.Status.VALIDATED, at=timezone.now() - timedelta(hours=2))
    Supervision.objects.create(entity=held, kind=Supervision.Kind.HOLD, actor="alice", reason="a migration")
    now = timezone.now()
    alone = {e.pk: opening.refusal(e, origin=Cycle.Origin.GRADE, now=now) for e in (resting, held, capped)}
    assert all(alone.values())

    assert trigger.on_landed(bad_landings([resting, held, free, capped], 3), now=now) == 1

    for entity in (resting, held, capped):
        assert refusal_rows(entity) == [(alone[entity.pk], 3)]
    (live,) = Cycle.objects.filter(entity=free, claim=free.pk)
    assert refusal_rows(free) == [(f"cycle {live.pk} is live ({live.get_phase_display()})", 2)]


def test_the_next_batch_folds_into_the_same_row():
    entity = looped()
    history(entity, "bggg", start=timezone.now() - timedelta(hours=3))
    settled_cycle(entity, Cycle.Status.VALIDATED, at=timezone.now() - timedelta(hours=1))
    trigger.on_landed(bad_landings([entity], 2))
    trigger.on_landed(bad_landings([entity], 3))
    [(reason, times)] = refusal_rows(entity)
    assert reason.startswith("cooldown: rests until ") and times == 5


def test_refused_landings_cost_the_same_statements_whatever_their_number_and_their_entities():
    made = iter(range(1000))

    def batch(n_entities: int, per_entity: int) -> int:
        entities = [looped(f"e{next(made)}") for _ in range(n_entities)]
        for entity in entities:
            history(entity, "bggg", start=timezone.now() - timedelta(hours=3))
            settled_cycle(entity, Cycle.Status.VALIDATED, at=timezone.now() - timedelta(hours=1))
        landed = bad_landings(entities, per_entity)
        with CaptureQueriesContext(connection) as read:
            assert trigger.on_landed(landed) == 0
        return len(read.captured_queries)

    few = batch(2, 2)
    assert batch(2, 10) == few
    # The batch's refusals fold in one statement and the rows no fold took are inserted in one: an entity more
    # costs nothing on Postgres, and on SQLite its window's read.
    per_entity = 0 if connection.vendor == "postgresql" else 1
    assert batch(6, 10) == few + 4 * per_entity
    assert batch(20, 3) == few + 18 * per_entity


def test_grades_of_entities_out_of_the_loop_cost_one_query(django_assert_num_queries):
    plain = looped("plain", loop={"enabled": False})
    landed = [graded(plain, bad=True).pk for _ in range(5)]
    with django_assert_num_queries(1):
        assert trigger.on_landed(landed) == 0


def test_a_batch_window_from_a_clean_base_is_the_window_read_alone():
    from evolution.presets.repair import graded_window, windows_for

    entity = looped()
    start = timezone.now() - timedelta(hours=2)
    history(entity, "bgbbgbgggbbg", start=start)
    base = start + timedelta(minutes=6, seconds=30)  # a lock group's last change: runs graded before it do not count
    landed = [graded(entity, bad=True, at=timezone.now() - timedelta(seconds=10 - k)) for k in range(3)]
    now = timezone.now()
    for grade in landed:
        grade.entity = entity
    batch = windows_for(landed, {entity.pk: entity}, now=now, after={entity.pk: base})
    for grade in landed:
        alone = graded_window(entity, through=grade, size=5, now=now, after=base)
        assert [g.execution_id for g in batch[grade.pk]] == [g.execution_id for g in alone]
        assert all(g.graded_at > base for g in alone)


def test_a_batch_of_healthy_and_bad_landings_reads_every_bad_window_with_the_batch():
    from evolution.presets.repair import graded_window, windows_for

    entity = looped()
    history(entity, "bgbgg", start=timezone.now() - timedelta(hours=1))
    batch = [graded(entity, bad=k % 3 == 0, at=timezone.now() - timedelta(seconds=40 - k)) for k in range(30)]
    bad = [g for g in batch if not g.passed]
    now = timezone.now()
    for grade in batch:
        grade.entity = entity
    read = windows_for(bad, {entity.pk: entity}, now=now, landed={entity.pk: len(batch)})
    assert set(read) == {g.pk for g in bad}
    for grade in bad:
        alone = graded_window(entity, through=grade, size=5, now=now)
        assert [g.execution_id for g in read[grade.pk]] == [g.execution_id for g in alone]


def test_the_cycles_a_batch_opens_read_the_remotes_default_branch_once(monkeypatch):
    # Issue 18: each opening's freeze asked the remote for its default branch (a git subprocess, a network round
    # trip on GitHub); a batch's openings share one instant and freeze one base.
    import singularity.brain.git as brain_git

    asked = []
    real = brain_git.git

    def counted(*args, **kwargs):
        if args and args[0] == "ls-remote":
            asked.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(brain_git, "git", counted)
    entities = [looped(f"free{i}") for i in range(3)]
    for entity in entities:
        history(entity, "bggg", start=timezone.now() - timedelta(hours=3))
    assert trigger.on_landed(bad_landings(entities, 1)) == 3
    assert len(asked) == 1
    bases = {c.frozen["baseSha"] for c in Cycle.objects.filter(entity__in=entities, analysed=True)}
    assert len(bases) == 1
    other = looped("alone")
    history(other, "bggg", start=timezone.now() - timedelta(hours=3))
    assert trigger.on_landed(bad_landings([other], 1)) == 1
    assert len(asked) == 2  # the next batch asks again


def test_a_batch_folds_each_entity_into_its_own_newest_refusal_of_the_kind_and_inserts_the_rest():
    # One fold statement for the batch: an entity whose newest cycle is a refusal of the kind takes the fold, one
    # whose newest is another kind's refusal (or no refusal) gets a row of its own, as each alone would.
    folded, other_kind, fresh = looped("folded"), looped("other-kind"), looped("fresh")
    now = timezone.now()
    for entity in (folded, other_kind, fresh):
        history(entity, "bggg", start=now - timedelta(hours=3))
        settled_cycle(entity, Cycle.Status.VALIDATED, at=now - timedelta(hours=1))
    trigger.on_landed(bad_landings([folded], 2), now=now)
    [(cooldown, times)] = refusal_rows(folded)
    assert cooldown.startswith("cooldown: ") and times == 2
    Supervision.objects.create(entity=other_kind, kind=Supervision.Kind.HOLD, actor="alice", reason="a migration")
    trigger.on_landed(bad_landings([other_kind], 1), now=now)
    Supervision.objects.filter(entity=other_kind).delete()
    [(held, _)] = refusal_rows(other_kind)

    trigger.on_landed(bad_landings([folded, other_kind, fresh], 3), now=now)

    assert refusal_rows(folded) == [(cooldown, 5)]
    assert refusal_rows(other_kind) == [(held, 1), (cooldown.replace(folded.slug, other_kind.slug), 3)]
    assert refusal_rows(fresh) == [(cooldown.replace(folded.slug, fresh.slug), 3)]


def test_a_refusal_already_recorded_under_its_key_is_not_recorded_twice_and_fails_nothing():
    # A landing heard twice (a redelivered message, a second worker): its refusal row exists under the landing's
    # key, of another kind than today's (so nothing folds). The batch's insert skips it instead of failing the
    # whole batch; the row already there stands.
    first, second = looped("heard-a"), looped("heard-b")
    now = timezone.now()
    anchors = {entity: graded(entity, bad=True, at=now).execution for entity in (first, second)}
    for entity, anchor in anchors.items():
        opening.record_refusal(
            entity, origin=Cycle.Origin.GRADE, reason="cooldown: rests a while", now=now, anchor=anchor
        )
    again = {
        entity: [("maxAnalysesPerDay: 3 analyses in the last 24 hours", anchor, 1)]
        for entity, anchor in anchors.items()
    }
    opening.record_refusals_many(again, origin=Cycle.Origin.GRADE, now=now)
    for entity in (first, second):
        assert refusal_rows(entity) == [("cooldown: rests a while", 1)]


def test_the_landed_grades_are_the_rows_the_models_read_and_their_other_columns_are_read_on_first_use():
    # Issue 18: the trigger builds a batch's grades and their runs without the models' per-field construction.
    # What it reads equals the model's value; a column it leaves out is read when asked, equal too.
    entity, other = looped("read"), looped("off", loop={"enabled": False})
    landed = [graded(entity, bad=k % 2 == 0, at=timezone.now() - timedelta(seconds=5 - k)) for k in range(4)]
    landed += [graded(other, bad=True), graded(entity, bad=True, status=Grade.Status.FAILED)]
    landed[1].metrics = {"accuracy": 0.25, "nested": {"a": [1, "2"]}}
    landed[1].score = 0.5
    landed[1].failure_category = "wrong label"
    landed[1].save()

    read = trigger.landed_grades([str(g.pk) for g in reversed(landed)])

    assert [g.pk for g in read] == [g.pk for g in landed[:4]]  # in the loop, graded, oldest graded first
    for grade in read:
        model = Grade.objects.select_related("execution").get(pk=grade.pk)
        for name in (*trigger.LANDED_GRADE, "booked_at", "reason", "criteria", "cost_usd"):
            assert getattr(grade, name) == getattr(model, name), name
        for name in ("id", *trigger.LANDED_RUN, "input", "output", "cost_usd", "commit"):
            assert getattr(grade.execution, name) == getattr(model.execution, name), name
        assert grade.entity == entity


def test_the_batch_windows_are_the_grades_each_landing_reads_alone_with_every_column_it_reads():
    from evolution.presets.base import outcomes
    from evolution.presets.repair import graded_window, windows_for

    entity = looped()
    history(entity, "bgbgg", start=timezone.now() - timedelta(hours=1))
    batch = [graded(entity, bad=k % 3 == 0, at=timezone.now() - timedelta(seconds=20 - k)) for k in range(8)]
    batch[0].metrics = {"duration_ms": 90000, "x": [1, {"y": None}]}
    batch[0].save()
    now = timezone.now()
    read = windows_for(trigger.landed_grades([g.pk for g in batch]), {entity.pk: entity}, now=now)
    for grade in batch:
        alone = graded_window(entity, through=grade, size=5, now=now)
        assert outcomes(read[grade.pk], entity.terms) == outcomes(alone, entity.terms)
        assert [(g.graded_at, g.judge, g.entity_id) for g in read[grade.pk]] == [
            (g.graded_at, g.judge, g.entity_id) for g in alone
        ]


def test_the_batch_reads_its_entities_watches_queued_ideas_and_claims_in_one_statement_as_each_read_says():
    import random

    from evolution.models import Idea

    rng = random.Random(6)
    entities = [looped(f"f{i}") for i in range(10)]
    for i, entity in enumerate(entities):
        if rng.random() < 0.4:
            Cycle.objects.create(entity=entity, key=f"w{i}", origin="grade", phase=Cycle.Phase.WATCHING)
        if rng.random() < 0.4:
            Cycle.objects.create(
                entity=entity, key=f"l{i}", origin="grade", phase=Cycle.Phase.ANALYSING, claim=entity.pk
            )
        for k in range(rng.randrange(3)):
            Idea.objects.create(
                entity=entity,
                text=f"idea {k}",
                approved=rng.random() < 0.6,
                status=rng.choice([Idea.Status.QUEUED, Idea.Status.TAKEN]),
            )
    ids = [e.pk for e in entities]
    with CaptureQueriesContext(connection) as read:
        watched, queued, claimed = trigger.loop_facts(ids)
    assert len(read.captured_queries) == 1
    assert watched == set(
        Cycle.objects.filter(entity_id__in=ids, phase=Cycle.Phase.WATCHING).values_list("entity_id", flat=True)
    )
    assert queued == set(
        Idea.objects.filter(entity_id__in=ids, status=Idea.Status.QUEUED, approved=True).values_list(
            "entity_id", flat=True
        )
    )
    assert claimed == {c.claim: c.pk for c in Cycle.objects.filter(claim__in=ids)}
    assert watched and queued and claimed and len(queued) < len(entities)


def test_each_landing_of_a_batch_is_decided_as_alone_when_the_batch_shares_its_outcomes():
    # Issue 18: a batch asks is_bad of a landing once and shares each window run's outcome between the windows
    # that hold it (the preset's own rule). Every landing's answer is the one decide gives it with nothing shared.
    import random

    from evolution.presets.repair import windows_for

    rng = random.Random(18)
    entities = [
        looped(f"m{i}", loop={"trigger": {"windowRuns": rng.choice([3, 5]), "minFailures": 2}}) for i in range(4)
    ]
    start = timezone.now() - timedelta(hours=2)
    for entity in entities:
        history(entity, "".join(rng.choice("bg") for _ in range(6)), start=start)
    at = timezone.now() - timedelta(seconds=100)
    landed = [
        graded(rng.choice(entities), bad=rng.random() < 0.6, at=at + timedelta(milliseconds=k)).pk for k in range(60)
    ]
    grades = trigger.landed_grades(landed)
    by_pk = {e.pk: e for e in entities}
    for grade in grades:
        grade.entity = by_pk[grade.entity_id]
    now = timezone.now()
    runs = windows_for(grades, by_pk, now=now, after={e.pk: None for e in entities})
    memo: dict = {}
    answers = []
    for grade in grades:
        shared = trigger.decide(
            grade.entity,
            grade,
            now=now,
            runs=runs.get(grade.pk),
            changed=None,
            bad=is_bad(grade, grade.entity.terms),
            memo=memo.setdefault(grade.entity_id, {}),
        )
        alone = trigger.decide(grade.entity, grade, now=now, runs=runs.get(grade.pk), changed=None)
        assert shared == alone
        answers.append(shared[0] is not None)
    assert any(answers) and not all(answers)
    assert any(len(m) for m in memo.values())


def test_neither_a_refusal_nor_an_opening_reads_what_the_trigger_leaves_unread_of_an_entity(monkeypatch):
    # Issue 18: the batch reads its entities without their body, frontmatter and provenance (most of a row). An
    # opening (the judge pin, the freeze, the claim) and a refusal never ask for them: no statement reads them late.
    from grading.models import Entity

    asked = []
    real = Entity.refresh_from_db

    def refresh(self, using=None, fields=None, from_queryset=None):
        asked.append(fields)
        return real(self, using=using, fields=fields, from_queryset=from_queryset)

    monkeypatch.setattr(Entity, "refresh_from_db", refresh)
    monkeypatch.setattr(Cycle, "refresh_from_db", refresh)  # nor of the cycle holding a claim
    opens, resting, live = looped("opens", loop={"group": ["support"]}), looped("resting"), looped("live")
    for entity in (opens, resting, live):
        history(entity, "bggg", start=timezone.now() - timedelta(hours=3))
    settled_cycle(resting, Cycle.Status.VALIDATED, at=timezone.now() - timedelta(hours=1))
    holder = Cycle.objects.create(
        entity=live, key="live", origin="grade", phase=Cycle.Phase.MERGE_WAIT, claim=live.pk, window={"runIds": []}
    )
    assert trigger.on_landed(bad_landings([opens, resting, live], 2)) == 1
    assert Cycle.objects.filter(entity=opens, claim=opens.pk).exists()
    assert refusal_rows(resting)[0][1] == 2
    assert refusal_rows(live) == [(cycles.live_refusal(live, holder=holder), 2)]
    assert asked == []
