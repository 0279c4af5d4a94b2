"""An agent's loop_widen waits on a person's widen card; its answer applies the write once."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import timedelta
from typing import Any

from django.utils import timezone

from evolution.steering.settings.base import (
    APPROVE,
    CARD_DIFF_CHARS,
    CARD_HOURS,
    DECLINE,
    PRODUCER,
    Answer,
    Edit,
    subject_of,
)
from evolution.steering.settings.oversight import _show
from evolution.steering.settings.reads import policy_path
from evolution.steering.settings.write import Staged
from grading.models import Entity


def _request_key(target: Entity | None, key: str, op: str, value: Any, expect: dict[str, str]) -> str:
    body = json.dumps([subject_of(target), key, op, value, expect], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def _open_card(
    target: Entity | None, key: str, op: str, value: Any, *, actor: str, preview: Answer, staged: Staged | None
) -> Any:
    """Open (or find, for the same request) the widen card an agent's loop_widen waits on."""
    from evolution.core import links as status
    from hitl.actions import open_card
    from hitl.models import Card

    expect = {f["path"]: f["base"] for f in preview.files}
    request = _request_key(target, key, op, value, expect)
    pending = Card.objects.filter(
        producer=PRODUCER, kind=Card.Kind.WIDEN, status=Card.Status.PENDING, payload__request=request
    ).first()
    if pending is not None:
        return pending
    hours = CARD_HOURS
    if staged is not None and staged.tip.definition is not None and staged.tip.definition.ok:
        hours = staged.tip.definition.terms["loop"].get("reviewDeadlineHours") or CARD_HOURS
    edit = Edit(key, op, value)
    url = policy_path(target)
    return open_card(
        producer=PRODUCER,
        kind=Card.Kind.WIDEN,
        key=f"{PRODUCER}:widen:{uuid.uuid4().hex}",
        title=f"Widen oversight: {preview.subject} {edit.words()}"[:200],
        subject=preview.subject[:200],
        subject_url=status.absolute(url),
        text=card_text(actor, edit, preview),
        expires_at=timezone.now() + timedelta(hours=float(hours)),
        options=[{"value": APPROVE, "label": "Approve"}, {"value": DECLINE, "label": "Decline"}],
        payload={
            "request": request,
            "targetKind": target.target_kind if target is not None else None,
            "targetId": target.slug if target is not None else None,
            "key": key,
            "op": op,
            "value": value,
            "actor": actor,
            "expect": expect,
            "widened": preview.widened,
        },
    )


def card_text(actor: str, edit: Edit, preview: Answer) -> str:
    """The widen card's text: who asks, each widening, the diff of the write."""
    lines = [f"{actor} asks to widen oversight on {preview.subject}: {edit.words()}.", "", "This widens:"]
    lines += [f"- {w['subject']} {w['knob']}: {_show(w['from'])} → {_show(w['to'])}" for w in preview.widened]
    diff = "".join(f["diff"] for f in preview.files)
    if len(diff) > CARD_DIFF_CHARS:
        diff = diff[:CARD_DIFF_CHARS] + "\n… (the rest of the diff is on the dashboard)\n"
    lines += [
        "",
        "The write:",
        diff.rstrip("\n"),
        "",
        "Approve makes this write as you; Decline leaves the file as it is.",
    ]
    return "\n".join(lines)
