"""The loop's admin: its records read-only; holds, releases, re-arms and dismissals made from Supervision › Add as the
signed-in person; loop:auto_accept grants issued (never for a chat role) and revoked.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from evolution.loop import machine
from evolution.models import (
    ActionLog,
    AutoAcceptGrant,
    CommitStatus,
    Cycle,
    Idea,
    PullRequest,
    Supervision,
    WaitingWindow,
)
from evolution.steering import autonomy, supervision
from tests.evolution.loop_helpers import looped, settled_cycle
from tests.evolution.page_helpers import make_cycle, make_lesson, make_round
from tests.evolution.watch_helpers import T0
from tests.grading.grading_helpers import make_entity

pytestmark = pytest.mark.django_db

ADD = "/admin/evolution/supervision/add/"
GROUPS = {"loop": {"groups": {"audience": {}}}}


@pytest.fixture
def admin_client(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


@pytest.fixture
def triage():
    return looped("triage", loop={"group": ["audience"]}, manifest=GROUPS)


def add(client: Client, **fields) -> str:
    """Post Supervision › Add; return the page it lands on."""
    data = {"kind": "hold", "entity": "", "group": "", "cycle": "", "reason": "", **fields}
    return client.post(ADD, data, follow=True).content.decode()


# --- The records ---------------------------------------------------------------------------------


def test_every_loop_record_is_listed_and_none_is_editable(admin_client, triage):
    cycle = make_cycle(triage, phase=Cycle.Phase.SETTLED, status=Cycle.Status.VALIDATED)
    rnd = make_round(cycle, summary="Ask for the invoice number first")
    make_lesson(rnd)
    PullRequest.objects.create(number=7, title="loop: triage", head="loop/x", head_sha="a" * 40, base_sha="b" * 40)
    CommitStatus.objects.create(sha="a" * 40, context="omnislash/validation", state="success")
    Idea.objects.create(entity=triage, text="try the date first", author="bob")
    WaitingWindow.objects.create(entity=triage, have=2, need=5)
    ActionLog.objects.create(actor="bob", op="loop_set", subject="scenario:triage", summary="set x")
    for model in ("cycle", "round", "lesson", "recall", "pullrequest", "commitstatus", "idea", "actionlog",
                  "waitingwindow", "supervision", "autoacceptgrant"):  # fmt: skip
        assert admin_client.get(f"/admin/evolution/{model}/").status_code == 200, model
    for model in ("cycle", "round", "lesson", "pullrequest", "idea", "actionlog"):
        assert admin_client.get(f"/admin/evolution/{model}/add/").status_code == 403, model
    story = admin_client.get(f"/admin/evolution/cycle/{cycle.pk}/change/").content.decode()
    assert "Ask for the invoice number first" in story  # its rounds inline
    assert admin_client.post(f"/admin/evolution/cycle/{cycle.pk}/change/", {"status": "failed"}).status_code == 403
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.VALIDATED


# --- Supervision › Add ----------------------------------------------------------------------------


def test_a_hold_made_in_the_admin_is_stamped_with_the_person_and_refuses_cycles(admin_client, triage):
    page = add(admin_client, kind="hold", entity=triage.pk, reason="billing migration")
    row = Supervision.objects.get()
    assert (row.kind, row.entity, row.actor, row.reason) == ("hold", triage, "alice", "billing migration")
    assert "was added successfully" in page
    assert ActionLog.objects.get().summary == "hold scenario:triage: billing migration"

    assert machine.open_cycle(triage, origin=Cycle.Origin.REQUEST).reason == "held by alice: billing migration"


def test_the_admin_form_refuses_what_the_write_would(admin_client, triage):
    assert "A hold needs a reason" in add(admin_client, kind="hold", entity=triage.pk, reason="  ")
    both = add(admin_client, kind="hold", entity=triage.pk, group="audience", reason="x")
    assert "Pick an entity or a lock group (one of them)" in both
    assert "Select a valid choice. ghost is not one of the available choices" in add(
        admin_client, kind="hold", group="ghost", reason="x"
    )
    assert "nothing to release: no hold stands on scenario:triage" in add(
        admin_client, kind="release", entity=triage.pk
    )
    assert "A re-arm is for one entity" in add(admin_client, kind="rearm", group="audience")
    assert "Pick the failed cycle to dismiss" in add(admin_client, kind="dismiss")
    assert not Supervision.objects.exists()


def test_a_standing_hold_links_to_its_release_form_filled_in(admin_client, triage):
    supervision.hold({"group": "audience"}, actor="kpi", reason="meetings down")
    listing = admin_client.get("/admin/evolution/supervision/").content.decode()
    assert f'href="{ADD}?kind=release&amp;group=audience"' in listing
    form = admin_client.get(f"{ADD}?kind=release&group=audience").content.decode()
    assert '<option value="release" selected>' in form and '<option value="audience" selected>' in form
    add(admin_client, kind="release", group="audience", reason="recovered")
    assert supervision.hold_refusal(triage) is None
    assert Supervision.objects.order_by("-id").first().actor == "alice"
    listing = admin_client.get("/admin/evolution/supervision/").content.decode()
    assert "Release…" not in listing  # the hold no longer stands


def test_a_rearm_in_the_admin_lifts_the_breakers_pause(admin_client):
    entity = looped("pulse", loop={"autonomy": {"decide": "auto", "merge": "auto"}})
    for minutes in (10, 20):
        cycle = settled_cycle(entity, Cycle.Status.REGRESSED, at=T0 + timedelta(minutes=minutes))
        Cycle.objects.filter(pk=cycle.pk).update(merged_at=cycle.completed_at)
    assert autonomy.paused(entity)
    add(admin_client, kind="rearm", entity=entity.pk, reason="read both regressions")
    assert autonomy.paused(entity) is None
    assert Supervision.objects.get().actor == "alice"


def test_a_failure_dismissed_in_the_admin_leaves_the_unread_failures(admin_client, triage):
    failed = settled_cycle(triage, Cycle.Status.FAILED, at=T0)
    add(admin_client, kind="dismiss", cycle=failed.pk, reason="gateway outage")
    assert not supervision.failures_unread().exists()
    assert Supervision.objects.get().cycle == failed


def test_supervision_rows_are_never_changed_or_deleted(admin_client, triage):
    row = supervision.hold(triage, actor="bob", reason="x")
    assert admin_client.post(f"/admin/evolution/supervision/{row.pk}/change/", {"reason": "y"}).status_code == 403
    assert admin_client.post(f"/admin/evolution/supervision/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    row.refresh_from_db()
    assert row.reason == "x"


# --- Auto-accept grants ------------------------------------------------------------------------------


def test_a_grant_is_issued_with_calls_and_hours_and_revoked(admin_client, triage, time_machine):
    time_machine.move_to(T0, tick=False)
    page = admin_client.post(
        "/admin/evolution/autoacceptgrant/add/", {"entity": triage.pk, "max_calls": 3, "ttl_hours": "12"}, follow=True
    )
    assert "was added successfully" in page.content.decode()
    grant = AutoAcceptGrant.objects.get()
    assert (grant.entity, grant.issued_by, grant.max_calls, grant.calls) == (triage, "alice", 3, 0)
    assert grant.expires_at == T0 + timedelta(hours=12)
    assert autonomy.active_grant(triage, now=T0) == grant
    log = ActionLog.objects.get(op="auto_accept")
    assert log.actor == "alice" and log.subject == "scenario:triage" and "3 call(s)" in log.summary
    admin_client.post("/admin/evolution/autoacceptgrant/", {"action": "revoke", "_selected_action": [grant.pk]})
    grant.refresh_from_db()
    assert grant.revoked_at == T0
    assert autonomy.active_grant(triage, now=T0) is None
    assert ActionLog.objects.filter(op="auto_accept_revoke", actor="alice").count() == 1


def test_a_grant_is_never_issued_for_a_chat_role(admin_client):
    role = make_entity("concierge", kind="role", loop={"enabled": True})
    page = admin_client.post(
        "/admin/evolution/autoacceptgrant/add/", {"entity": role.pk, "max_calls": 1, "ttl_hours": "1"}
    ).content.decode()
    assert "role:concierge is a chat role: loop:auto_accept is never issued for a chat role" in page
    assert not AutoAcceptGrant.objects.exists()


def test_a_grant_needs_calls_and_a_time_to_live(admin_client, triage):
    page = admin_client.post(
        "/admin/evolution/autoacceptgrant/add/", {"entity": triage.pk, "max_calls": 0, "ttl_hours": "0"}
    ).content.decode()
    assert "Ensure this value is greater than or equal to 1" in page
    assert "Ensure this value is greater than or equal to 0.01" in page
    assert not AutoAcceptGrant.objects.exists()


def test_an_issued_grant_cannot_be_edited(admin_client, triage):
    grant = AutoAcceptGrant.objects.create(
        entity=triage, issued_by="bob", max_calls=1, expires_at=timezone.now() + timedelta(hours=1)
    )
    admin_client.post(f"/admin/evolution/autoacceptgrant/{grant.pk}/change/", {"max_calls": 99})
    grant.refresh_from_db()
    assert grant.max_calls == 1


# --- Every list and change page opens (issue 15: Admin › Supervisions was a 500) ----------------


def test_every_admin_list_and_change_page_opens(admin_client, triage):
    from django.contrib import admin as django_admin

    cycle = make_cycle(triage, phase=Cycle.Phase.SETTLED, status=Cycle.Status.VALIDATED)
    make_lesson(make_round(cycle, summary="Ask for the invoice number first"))
    add(admin_client, kind="hold", entity=str(triage.pk), reason="a person's freeze")
    add(admin_client, kind="release", entity=str(triage.pk), reason="done")
    add(admin_client, kind="hold", group="audience", reason="the whole group")
    assert Supervision.objects.count() == 3
    for model, model_admin in django_admin.site._registry.items():
        meta = model._meta
        listed = admin_client.get(f"/admin/{meta.app_label}/{meta.model_name}/")
        assert listed.status_code == 200, f"{meta.label} list: {listed.status_code}"
        for row in model_admin.get_queryset(listed.wsgi_request)[:3]:
            page = admin_client.get(f"/admin/{meta.app_label}/{meta.model_name}/{row.pk}/change/")
            assert page.status_code == 200, f"{meta.label} {row.pk}: {page.status_code}"


def test_the_cycles_admin_names_a_phase_in_peoples_words(admin_client, triage):
    cycle = make_cycle(triage, phase=Cycle.Phase.MERGE_WAIT)
    listed = admin_client.get("/admin/evolution/cycle/").content.decode()
    changed = admin_client.get(f"/admin/evolution/cycle/{cycle.pk}/change/").content.decode()
    filtered = admin_client.get("/admin/evolution/cycle/?phase__exact=merge_wait")
    for html in (listed, changed):
        assert "Waiting for the merge" in html and "Merge Wait" not in html
    assert filtered.status_code == 200 and str(cycle.pk) in filtered.content.decode()
