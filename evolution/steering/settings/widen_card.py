"""An agent's ask waits on a person's widen card; its answer applies the write once.

An agent's loop_widen that widens oversight, and any agent write (loop_set,
loop_widen, loop_join) that loosens spend, the check or the watch, opens one.
How many of one agent's cards wait at once is capped (``evolution.steering.asks``,
settings.LOOP_AGENT_MAX_PENDING_CARDS): the next ask is refused naming the cap
and how many wait.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import timedelta
from typing import Any

from django.utils import timezone

from evolution.steering import asks
from evolution.steering.settings import grants
from evolution.steering.settings.base import (
    APPROVE,
    CARD_DIFF_CHARS,
    CARD_HOURS,
    DECLINE,
    OP_WIDEN,
    PRODUCER,
    TOO_MANY,
    Answer,
    Edit,
    SettingsRefusal,
    subject_of,
)
from evolution.steering.settings.oversight import _show
from evolution.steering.settings.reads import policy_path
from evolution.steering.settings.write import Staged
from grading.models import Entity


def _request_key(
    target: Entity | None, key: str, op: str, value: Any, expect: dict[str, str], verb: str = OP_WIDEN
) -> str:
    parts: list[Any] = [subject_of(target), key, op, value, expect]
    if verb != OP_WIDEN:  # loop_widen's key stays what it was, so a card opened before still matches
        parts.append(verb)
    body = json.dumps(parts, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def _refuse_over_cap(asker: str) -> None:
    """SettingsRefusal(too_many_pending) when ``asker`` already has the most cards a person may be asked at once."""
    why = asks.over_cap(asker)
    if why is not None:
        raise SettingsRefusal(TOO_MANY, why)


def _open_card(
    target: Entity | None,
    key: str,
    op: str,
    value: Any,
    *,
    actor: str,
    preview: Answer,
    staged: Staged | None,
    verb: str = OP_WIDEN,
    asker: str = "",
    extra: dict[str, Any] | None = None,
) -> Any:
    """Open (or find, for the same request) the widen card an agent's write waits on; ``verb`` is the write a
    person's Approve makes (loop_set, loop_widen or loop_join). Refused over the agent's cap."""
    from evolution.core import links as status
    from hitl.actions import open_card
    from hitl.models import Card

    asker = asker or actor
    expect = {f["path"]: f["base"] for f in preview.files}
    request = _request_key(target, key, op, value, expect, verb)
    pending = Card.objects.filter(
        producer=PRODUCER, kind=Card.Kind.WIDEN, status=Card.Status.PENDING, payload__request=request
    ).first()
    if pending is not None:
        return pending
    _refuse_over_cap(asker)
    hours = CARD_HOURS
    if staged is not None and staged.tip.definition is not None and staged.tip.definition.ok:
        hours = staged.tip.definition.terms["loop"].get("reviewDeadlineHours") or CARD_HOURS
    edit = Edit(key, op, value)
    url = policy_path(target)
    what = "Widen oversight" if preview.widened else "Loosen spend or checks"
    return open_card(
        producer=PRODUCER,
        kind=Card.Kind.WIDEN,
        key=f"{PRODUCER}:widen:{uuid.uuid4().hex}",
        title=f"{what}: {preview.subject} {_what(edit, preview, verb)}"[:200],
        subject=preview.subject[:200],
        subject_url=status.absolute(url),
        text=card_text(actor, edit, preview, verb=verb, grant=asker if len(_options(verb, preview, extra)) > 2 else ""),
        expires_at=timezone.now() + timedelta(hours=float(hours)),
        options=_options(verb, preview, extra),
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
            "loosened": preview.loosened,
            "verb": verb,
            "asker": asker,
            **(extra or {}),
        },
    )


def _options(verb: str, preview: Answer, extra: dict[str, Any] | None) -> list[dict[str, str]]:
    """Approve / Decline; an agent's loop_widen that widens oversight also offers "Approve once": Approve mints
    the agent a loop:autonomy grant for its further widenings (``grants``), Approve once makes this write alone."""
    options = [{"value": APPROVE, "label": "Approve"}]
    if verb == OP_WIDEN and preview.widened and (extra or {}).get("scope") is not None:
        options[0]["label"] = f"Approve (and its widenings for {grants.HOURS} h)"
        options.append({"value": grants.APPROVE_ONCE, "label": "Approve once"})
    return [*options, {"value": DECLINE, "label": "Decline"}]


#: The most widenings or loosenings a card's text names one by one.
CARD_LINES = 20


def _listed(entries: list[dict[str, Any]]) -> list[str]:
    lines = [f"- {w['subject']} {w['knob']}: {_show(w['from'])} → {_show(w['to'])}" for w in entries[:CARD_LINES]]
    if len(entries) > CARD_LINES:
        lines.append(f"- … and {len(entries) - CARD_LINES} more")
    return lines


def _what(edit: Edit, preview: Answer, verb: str) -> str:
    """The asked write in a few words: the key for loop_set/loop_widen, every edit for loop_join."""
    return f"loop_join ({preview.summary})" if verb == "loop_join" else edit.words()


def card_text(actor: str, edit: Edit, preview: Answer, *, verb: str = OP_WIDEN, grant: str = "") -> str:
    """The widen card's text: who asks, each widening and loosening, the diff of the write (and, when the card
    offers it, what Approve grants ``grant``, the agent that asked)."""
    what = _what(edit, preview, verb)
    if preview.widened:
        lines = [f"{actor} asks to widen oversight on {preview.subject}: {what}.", "", "This widens:"]
        lines += _listed(preview.widened)
    else:
        lines = [f"{actor} asks to loosen spend or checks on {preview.subject}: {what} ({verb})."]
    if preview.loosened:
        families = sorted({w["family"] for w in preview.loosened})
        lines += ["", f"This loosens ({', '.join(families)}):", *_listed(preview.loosened)]
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
    if grant:
        lines.append(
            f"Approve also lets {grant} widen oversight again for {grants.HOURS} hours without asking (any entity, "
            "no call limit; a loosening of spend or checks still asks); Approve once makes this write alone."
        )
    return "\n".join(lines)
