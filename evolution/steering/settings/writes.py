"""The three verbs: loop_set (narrowing), loop_widen (a person's call, or an agent's card) and loop_join.

An agent's call of any of them that loosens spend, the pre-merge check or
the watch (``loosening``) waits on a person's card (answer ``pending``); a
person's makes the write at once.
"""

from __future__ import annotations

import copy
import json
from pathlib import PurePosixPath
from typing import Any

from evolution.steering.settings import grants
from evolution.steering.settings.base import (
    APPROVE,
    INVALID,
    KEY,
    OP_JOIN,
    OP_SET,
    OP_WIDEN,
    PRECONDITION,
    PRODUCER,
    REFUSED,
    REMOVE,
    SET,
    WHOLESALE,
    Answer,
    Edit,
    SettingsRefusal,
    Tip,
    log,
    target_named,
)
from evolution.steering.settings.oversight import _brain_switch
from evolution.steering.settings.widen_card import _open_card
from evolution.steering.settings.write import _run
from grading.models import Entity
from singularity.brain.loader import MANIFEST_PATH, EntityDefinition


def check_key(key: str, op: str, value: Any, target: Entity | None) -> None:
    """SettingsRefusal(invalid) for a key, op or value no tier could take; R5.24's entity retentionDays refused."""
    if op not in (SET, REMOVE):
        raise SettingsRefusal(INVALID, f"op: {op!r} is not set or remove")
    if not isinstance(key, str) or not KEY.match(key):
        raise SettingsRefusal(INVALID, f"key: {key!r} is not a dotted loop.* or evaluation.* key")
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise SettingsRefusal(INVALID, f"value: {value!r} is not plain data") from None
    if target is not None and key.startswith("loop.lessons") and op == SET:
        written = value if key == "loop.lessons" else {key.split(".")[-1]: value}
        if isinstance(written, dict) and "retentionDays" in written:
            raise SettingsRefusal(
                REFUSED,
                "loop.lessons.retentionDays on an entity is read by nothing: the lesson sweep reads "
                f"{MANIFEST_PATH}'s; write it at the brain tier",
            )


def key_edits(tip: Tip, key: str, op: str, value: Any) -> list[Edit]:
    """The edits one key makes at the tier: at the entity tier, a key inside a wholesale block the entity does
    not write itself copies the block as the entity sees it now, with that key replaced."""
    parts = key.split(".")
    definition = tip.definition
    if definition is None or len(parts) < 3 or parts[1] not in WHOLESALE.get(parts[0], ()):
        return [Edit(key, op, value)]
    block, name = parts[0], parts[1]
    own = (definition.frontmatter.get(block) or {}) if isinstance(definition.frontmatter, dict) else {}
    if isinstance(own, dict) and name in own:
        return [Edit(key, op, value)]
    if op == REMOVE:
        return []  # nothing of this tier's own to drop
    if not definition.ok:
        raise SettingsRefusal(
            REFUSED, f"{tip.subject}'s settings do not load, so its {block}.{name} cannot be copied: {definition.error}"
        )
    seen = copy.deepcopy((definition.terms.get(block) or {}).get(name) or {})
    if block == "loop" and name == "lessons":
        seen.pop("retentionDays", None)
    node = seen
    for step in parts[2:-1]:
        if not isinstance(node.get(step), dict):
            node[step] = {}
        node = node[step]
    node[parts[-1]] = value
    return [Edit(f"{block}.{name}", SET, seen)]


def loop_set(
    target: Entity | None,
    key: str,
    op: str = SET,
    value: Any = None,
    *,
    actor: str,
    is_agent: bool = False,
    asker: str = "",
    dry_run: bool = False,
    expect: dict[str, str] | None = None,
) -> Answer:
    """Set or remove one loop/evaluation key at the entity's tier (None: the manifest); refuse a widening.

    Asks nobody: narrowing writes and writes no person relies on go through
    (pulling either kill switch included). An agent's write that loosens
    spend, the check or the watch opens a person's card instead (``pending``);
    ``asker`` names the agent for its cap of waiting cards. Raises SettingsRefusal.
    """
    check_key(key, op, value, target)
    answer, staged = _run(
        target,
        lambda tip: key_edits(tip, key, op, value),
        op=OP_SET,
        actor=actor,
        dry_run=dry_run,
        expect=expect,
        allow_widen=False,
        hold_loosening=is_agent,
    )
    if is_agent and not dry_run and answer.loosened and answer.commit is None:
        return _pending(target, key, op, value, answer, staged, verb=OP_SET, actor=actor, asker=asker)
    return answer


def _pending(
    target: Entity | None,
    key: str,
    op: str,
    value: Any,
    preview: Answer,
    staged: Any,
    *,
    verb: str,
    actor: str,
    asker: str,
    extra: dict[str, Any] | None = None,
) -> Answer:
    """Open (or find) the person's card an agent's held write waits on; the answer says pending with its id."""
    card = _open_card(
        target, key, op, value, actor=actor, preview=preview, staged=staged, verb=verb, asker=asker, extra=extra
    )
    preview.dry_run, preview.pending, preview.card_id = False, True, str(card.pk)
    return preview


def loop_widen(
    target: Entity | None,
    key: str,
    op: str = SET,
    value: Any = None,
    *,
    actor: str,
    is_agent: bool,
    asker: str = "",
    scope: Any = None,
    dry_run: bool = False,
    expect: dict[str, str] | None = None,
) -> Answer:
    """loop_set's write, widenings allowed once a person approves: a person calling it is the approval; an
    agent's call opens a widen card (answer ``pending``) unless the write widens and loosens nothing, or it only
    widens and the agent (``scope``: its token's id) holds a standing loop:autonomy grant (``grants``), which an
    approved card of its mints. Raises SettingsRefusal."""
    check_key(key, op, value, target)

    def plan(tip: Tip) -> list[Edit]:
        return key_edits(tip, key, op, value)

    if is_agent and not dry_run:
        preview, staged = _run(target, plan, op=OP_WIDEN, actor=actor, dry_run=True, expect=expect, allow_widen=True)
        grant = grants.active(scope) if preview.widened and not preview.loosened else None
        if grant is not None:
            # Inside the grant's scope and lifetime: made unasked, over the bytes just validated.
            expect = expect or {f["path"]: f["base"] for f in preview.files}
            answer, _ = _run(
                target, plan, op=OP_WIDEN, actor=grants.actor_under(grant, asker or actor), dry_run=False,
                expect=expect, allow_widen=True,
            )  # fmt: skip
            if answer.commit is not None:
                grants.use(grant)
            return answer
        if preview.widened or preview.loosened:
            extra = {"scope": scope} if scope is not None and preview.widened else None
            return _pending(
                target, key, op, value, preview, staged, verb=OP_WIDEN, actor=actor, asker=asker, extra=extra
            )
    answer, _ = _run(target, plan, op=OP_WIDEN, actor=actor, dry_run=dry_run, expect=expect, allow_widen=True)
    return answer


def feature_of(path: str) -> str:
    """The feature an entity file ships in: the folder right under ``features/`` ("" outside it)."""
    parts = PurePosixPath(path).parts
    return parts[1] if len(parts) > 2 and parts[0] == "features" else ""


def feature_switched_off(manifest: dict[str, Any], feature: str) -> bool:
    """Whether the manifest switches the feature off (``features: {<feature>: {enabled: false}}``)."""
    features = manifest.get("features") if isinstance(manifest, dict) else None
    decl = features.get(feature) if isinstance(features, dict) else None
    return isinstance(decl, dict) and decl.get("enabled") is False


def unattended(definition: EntityDefinition) -> bool:
    """Nobody decides each execution: a heartbeat, a chat role, a scenario with a schedule."""
    return definition.kind in ("heartbeat", "role") or bool(definition.schedule)


def join_edits(tip: Tip, daily_cap: int | None) -> list[Edit]:
    """The edits loop_join makes on the entity, or SettingsRefusal naming why it cannot join."""
    definition = tip.definition
    assert definition is not None
    manifest = tip.snapshot.manifest
    subject = tip.subject
    feature = feature_of(definition.path)
    if feature and feature_switched_off(manifest, feature):
        raise SettingsRefusal(
            PRECONDITION,
            f"{subject}: its feature {feature} is switched off ({MANIFEST_PATH} features.{feature}.enabled)",
        )
    if not _brain_switch(manifest):
        raise SettingsRefusal(
            PRECONDITION,
            f"the brain's loop switch is off ({MANIFEST_PATH} loop.enabled: false); turning it back on is loop_widen's",
        )
    if not definition.ok:
        raise SettingsRefusal(REFUSED, f"{subject}'s loop settings do not load: {definition.error}")
    evaluation = definition.terms["evaluation"]
    brain_grading = manifest.get("evaluation") if isinstance(manifest.get("evaluation"), dict) else {}
    if not evaluation["enabled"] and brain_grading.get("enabled") is False:
        raise SettingsRefusal(
            PRECONDITION,
            f"{subject} is not graded yet and the brain's grading switch is off ({MANIFEST_PATH} evaluation.enabled: false)",
        )
    edits: list[Edit] = []
    if daily_cap is not None:
        if isinstance(daily_cap, bool) or not isinstance(daily_cap, int) or daily_cap < 1:
            raise SettingsRefusal(INVALID, f"dailyCap: {daily_cap!r} is not a whole number of runs, at least 1")
        edits.append(Edit("evaluation.sample.maxPerDay", SET, daily_cap))
    elif unattended(definition) and evaluation["sample"]["maxPerDay"] is None:
        raise SettingsRefusal(
            PRECONDITION,
            f"{subject} runs on its own and no tier sets evaluation.sample.maxPerDay: name dailyCap (the daily "
            "grading ceiling) to join it",
        )
    edits += [Edit("evaluation.enabled", SET, True), Edit("loop.enabled", SET, True)]
    if isinstance(definition.frontmatter, dict) and definition.frontmatter.get("enabled") is False:
        edits.append(Edit("enabled", SET, True))
    return edits


def loop_join(
    target: Entity | None,
    *,
    actor: str,
    is_agent: bool = False,
    asker: str = "",
    daily_cap: int | None = None,
    dry_run: bool = False,
    expect: dict[str, str] | None = None,
) -> Answer:
    """Turn the loop on for an entity: evaluation.enabled and loop.enabled true (and its own ``enabled`` back to
    true when it was paused: ``resumed``); ``daily_cap`` writes evaluation.sample.maxPerDay. An agent's join
    whose daily cap raises the ceiling waits on a person's card (``pending``). Raises SettingsRefusal."""
    if target is None:
        raise SettingsRefusal(INVALID, "loop_join names an entity (targetKind and targetId)")
    answer, staged = _run(
        target,
        lambda tip: join_edits(tip, daily_cap),
        op=OP_JOIN,
        actor=actor,
        dry_run=dry_run,
        expect=expect,
        allow_widen=False,
        hold_loosening=is_agent,
    )
    if is_agent and not dry_run and answer.loosened and answer.commit is None:
        return _pending(
            target,
            "evaluation.sample.maxPerDay",
            SET,
            daily_cap,
            answer,
            staged,
            verb=OP_JOIN,
            actor=actor,
            asker=asker,
            extra={"dailyCap": daily_cap},
        )
    answer.resumed = bool(staged and any(e.key == "enabled" for e in staged.edits) and answer.changed)
    return answer


def on_widen_card(card: Any) -> None:
    """Hear a closed widen card (producer ``loop-settings``): make the write it asks (its ``verb``: loop_widen,
    loop_set or loop_join) when a person approved it.

    Made over the bytes the card showed: a file changed since answers
    conflict. A write that can no longer be made is said in a notice.
    """
    from hitl.actions import post_notice
    from hitl.models import Card

    payload = card.payload or {}
    choice = (card.answer or {}).get("choice") if isinstance(card.answer, dict) else None
    if card.status != Card.Status.ANSWERED or choice not in (APPROVE, grants.APPROVE_ONCE):
        log.info("loop settings: widen card %s not approved (%s)", card.pk, card.status)
        return
    person = card.responded_by.get_username() if card.responded_by is not None else "someone"
    actor = f"{payload.get('actor', '?')} (approved by {person})"
    verb = payload.get("verb") or OP_WIDEN
    try:
        target = target_named(payload.get("targetKind"), payload.get("targetId"))
        expect = payload.get("expect") or None
        if verb == OP_JOIN:
            loop_join(target, actor=actor, daily_cap=payload.get("dailyCap"), expect=expect)
        elif verb == OP_SET:
            loop_set(target, payload.get("key", ""), payload.get("op", SET), payload.get("value"), actor=actor,
                     expect=expect)  # fmt: skip
        else:
            loop_widen(
                target,
                payload.get("key", ""),
                payload.get("op", SET),
                payload.get("value"),
                actor=actor,
                is_agent=False,
                expect=expect,
            )
            if choice == APPROVE:
                grants.mint(card)  # the agent's further widenings for a day go through unasked (R12.22)
    except SettingsRefusal as refusal:
        log.warning("loop settings: approved widen card %s not applied: %s", card.pk, refusal.detail)
        post_notice(
            producer=PRODUCER,
            kind="not_applied",
            title=f"Not applied: {card.title}"[:200],
            text=f"{person} approved it, but the write could not be made ({refusal.code}): {refusal.detail}",
            url=card.subject_url,
            subject=card.subject,
        )
