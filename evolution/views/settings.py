"""Settings → Policy defaults (``/evolution/settings/``) and an entity's Policy view, with their editors.

Both pages write through ``evolution.steering.settings`` — the functions the
REST tools call. Every editor is a form per knob: Save asks for a dry run
first (the diff, and what it widens, shown with HTMX), then Confirm makes the
write over the bytes the dry run read (``expect``: a file that changed since
answers conflict). An autonomy, perimeter or switch knob is saved through
loop_widen's op: the person at the page is the one who approves. Pulling a
kill switch is one click (loop_set; it asks nobody). Reads are for any
signed-in user, writes for staff. Every form works without JavaScript.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from evolution.steering import autonomy
from evolution.steering import settings as sw
from evolution.steering.settings.base import WHOLESALE
from evolution.views import aa as aa_panel
from evolution.views import backtest as backtests
from grading.models import Entity
from singularity.brain import defaults as D
from singularity.brain import terms as T

SHOWN_ACTIONS = 30

#: The gates ``requireCalibration`` holds a person's until the judge is calibrated.
CALIBRATED_GATES = ("loop.autonomy.decide", "loop.autonomy.merge")
#: The knobs the editors offer, in the order shown: (dotted key, what it is).
KNOBS: list[tuple[str, str]] = [
    ("evaluation.sample.rate", "Share of runs graded (0–1)"),
    ("evaluation.sample.maxPerDay", "Daily grading cap (owed by unattended entities)"),
    ("loop.preset", "Which loop: repair or evolve"),
    ("loop.threshold", "A score below this is a bad run"),
    ("loop.trigger.windowRuns", "Trigger: graded runs in the window"),
    ("loop.trigger.minFailures", "Trigger: bad runs that open a cycle"),
    ("loop.trigger.every", "Trigger: hours between looks (evolve)"),
    ("loop.autonomy.decide", "Who accepts a proposal"),
    ("loop.autonomy.merge", "Who lands its PR"),
    ("loop.autonomy.mergeMethod", "How a PR lands"),
    ("loop.autonomy.maxConsecutiveRegressions", "Breaker: regressions in a row (empty: no breaker)"),
    ("loop.autonomy.onInconclusive", "An inconclusive check: a person, ship or close"),
    ("loop.autonomy.onUnmeasured", "An unattended change nothing measured: pause or continue"),
    ("loop.autonomy.requireCalibration", "Gates held until human metrics are calibrated"),
    ("loop.check.mode", "Pre-merge check (replay or none)"),
    ("loop.watch.mode", "Watch after merge"),
    ("loop.watch.onInconclusive", "An inconclusive watch: keep or revert"),
    ("loop.cooldownHours", "Hours between cycles (empty: 6 h, 24 h after a regression)"),
    ("loop.maxAnalysesPerDay", "Analyses a day (empty: no cap)"),
    ("loop.reviewDeadlineHours", "Hours a card waits on a person"),
    ("loop.windowStalledAfterHours", "Hours before a window that does not move is a stall (0: never)"),
    ("loop.editablePaths", "Files a change may touch besides its own (one per line)"),
    ("loop.protectedPaths", "Files no change may touch (one per line)"),
    ("loop.maxChangedLines", "Most lines a change may add and remove"),
    ("loop.budget.maxUsdPerRun", "Most a loop run may spend (USD; empty: no cap)"),
]
#: The knobs an entity's Policy view edits.
ENTITY_KNOBS = [
    key
    for key, _ in KNOBS
    if key.startswith(("loop.autonomy.", "loop.trigger.", "loop.watch.onInconclusive"))
    or key
    in ("loop.preset", "loop.threshold", "loop.editablePaths", "loop.maxChangedLines", "evaluation.sample.maxPerDay")
]
LABELS = dict(KNOBS)


def spec_of(key: str) -> Any:
    """The schema check of a dotted key (terms.LOOP_SCHEMA / EVALUATION_SCHEMA), or None."""
    block, *path = key.split(".")
    node: Any = T.SCHEMAS.get(block)
    for name in path:
        if not isinstance(node, dict):
            return None
        node = node.get(name)
    return node


def engine_default(key: str) -> Any:
    block, *path = key.split(".")
    node: Any = {"loop": D.LOOP, "evaluation": D.EVALUATION}[block]
    for name in path:
        node = node.get(name) if isinstance(node, dict) else None
    return node


def widget(key: str) -> dict[str, Any]:
    """How a knob is edited: {kind: select|number|lines|text, choices, nullable}."""
    spec = spec_of(key)
    if isinstance(spec, T.Choice):
        return {"kind": "select", "choices": list(spec.values), "nullable": spec.nullable}
    if isinstance(spec, T.Flag):
        return {"kind": "select", "choices": ["true", "false"], "nullable": False}
    if isinstance(spec, T.Num):
        return {"kind": "number", "nullable": spec.nullable, "integer": spec.integer}
    if isinstance(spec, T.TextList):
        return {"kind": "lines", "nullable": spec.nullable}
    return {"kind": "text", "nullable": True}


def parse_value(key: str, raw: str) -> Any:
    """The typed value a form's text means for ``key``; SettingsRefusal(invalid) naming the key otherwise."""
    spec = spec_of(key)
    raw = (raw or "").strip()
    if isinstance(spec, T.TextList):
        return [line.strip() for line in raw.splitlines() if line.strip()]
    if raw == "" or raw == "null":
        return None
    if isinstance(spec, T.Flag):
        if raw not in ("true", "false"):
            raise sw.SettingsRefusal(sw.INVALID, f"{key}: choose true or false, not {raw!r}")
        return raw == "true"
    if isinstance(spec, T.Num):
        try:
            number = Decimal(raw)
        except InvalidOperation:
            raise sw.SettingsRefusal(sw.INVALID, f"{key}: {raw!r} is not a number") from None
        if number == number.to_integral_value() and (spec.integer or "." not in raw):
            return int(number)
        return float(number)
    return raw


def shown(value: Any) -> str:
    """A value as the editors write it: text as is, a list one item per line, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    if value is None:
        return ""
    return json.dumps(value)


def _leaf(tree: Any, key: str) -> tuple[bool, Any]:
    node = tree
    for name in key.split("."):
        if not isinstance(node, dict) or name not in node:
            return False, None
        node = node[name]
    return True, node


# --- Reads ---------------------------------------------------------------------------------


def read_manifest() -> tuple[dict[str, Any], str, str]:
    """(the manifest as plain data, the commit it was read at, why it could not be read or "")."""
    from grading.sync import current_checkout
    from singularity.brain import frontmatter
    from singularity.brain.loader import MANIFEST_PATH
    from singularity.errors import ConfigError, UpstreamError

    try:
        checkout = current_checkout()
        commit = checkout.head()
        if not checkout.exists_at(commit, MANIFEST_PATH):
            return {}, commit, ""
        data = frontmatter.parse_yaml(checkout.read_at(commit, MANIFEST_PATH).decode("utf-8"), path=MANIFEST_PATH)
    except (ConfigError, UpstreamError, UnicodeDecodeError) as exc:
        return {}, "", str(exc)
    return (data if isinstance(data, dict) else {}), commit, ""


def manifest_rows(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """One editor row per knob at the brain tier: the manifest's own value (or the engine's), where it comes from."""
    rows = []
    for key, label in KNOBS:
        written, value = _leaf(manifest, key)
        rows.append(
            {
                "key": key,
                "label": label,
                "value": value if written else engine_default(key),
                "text": shown(value if written else engine_default(key)),
                "tier": "manifest" if written else "engine",
                "widget": widget(key),
                "widen": sw.widens_family(key),
                "slug": key.replace(".", "-"),
            }
        )
    return rows


def words(value: Any) -> str:
    """A resolved value as a person reads it: text as is, true/false, numbers plain, a list comma-separated;
    "not set" for null (never raw JSON)."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ", ".join(words(v) for v in value) or "none"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {words(v)}" for k, v in value.items()) or "none"
    return str(value)


def _leaves(prefix: str, value: Any) -> list[str]:
    if isinstance(value, dict) and value:
        return [leaf for name, inner in value.items() for leaf in _leaves(f"{prefix}.{name}", inner)]
    return [prefix]


def wholesale_note(target: Entity | None, key: str) -> str:
    """What a one-key write at the entity tier copies with it, said before Confirm; "" when it copies nothing.

    A key inside a wholesale block (``loop.autonomy``, ``loop.watch``, …,
    ``evaluation.human``) that the entity does not write yet writes the whole
    block as the entity sees it now (``key_edits``), so every other value of
    the block is pinned at the entity tier from then on.
    """
    parts = key.split(".")
    if target is None or len(parts) < 3 or parts[1] not in WHOLESALE.get(parts[0], ()):
        return ""
    block, name = parts[0], parts[1]
    own = (target.frontmatter or {}).get(block) or {}
    if isinstance(own, dict) and name in own:
        return ""
    seen = ((target.terms or {}).get(block) or {}).get(name) or {}
    others = [leaf for leaf in _leaves(f"{block}.{name}", seen) if leaf != key and not key.startswith(leaf + ".")]
    if not others:
        return ""
    provenance = target.provenance or {}
    tiers = [_tier(provenance, leaf) for leaf in others]
    sources = [
        f"{tiers.count(tier)} from {where}"
        for tier, where in (("engine", "the engine's defaults"), ("manifest", "the brain's manifest"))
        if tiers.count(tier)
    ]
    source = ", ".join(sources) if sources else "as it sees them now"
    return (
        f"This writes the whole {block}.{name} block into {target.name or target.slug}: its {len(others)} other "
        f"value{'s' if len(others) != 1 else ''} ({', '.join(leaf.rsplit('.', 1)[1] for leaf in others)}) "
        f"{'are' if len(others) != 1 else 'is'} copied — {source} — and read “entity” from then on, so a later "
        "change to the brain's defaults no longer reaches them."
    )


def _tier(provenance: dict[str, str], key: str) -> str:
    path = key
    while path:
        if path in provenance:
            return provenance[path]
        path = path.rpartition(".")[0]
    return "engine"


def resolved_rows(entity: Entity) -> list[dict[str, Any]]:
    """Every resolved loop value of the entity (and its grading switch and sample) with the tier it came from."""
    provenance = entity.provenance or {}
    rows = []
    evaluation = (entity.terms or {}).get("evaluation") or {}
    leaves: list[tuple[str, Any]] = [("evaluation.enabled", evaluation.get("enabled"))]
    leaves += [(f"evaluation.sample.{k}", v) for k, v in (evaluation.get("sample") or {}).items()]

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value and prefix not in ("loop.groups", "loop.proposer.instructions"):
            for name, inner in value.items():
                walk(f"{prefix}.{name}", inner)
        else:
            leaves.append((prefix, value))

    for name, value in ((entity.terms or {}).get("loop") or {}).items():
        walk(f"loop.{name}", value)
    for key, value in leaves:
        rows.append({"key": key, "value": words(value), "tier": _tier(provenance, key)})
    return rows


def entity_editors(entity: Entity) -> list[dict[str, Any]]:
    """The entity view's editor rows: the resolved value, its tier, and whether the entity writes it itself."""
    rows = []
    doubts = autonomy.calibration_doubts(entity)
    for key in ENTITY_KNOBS:
        _, value = _leaf(entity.terms or {}, key)
        tier = _tier(entity.provenance or {}, key)
        # A gate requireCalibration releases, and the knob itself: each says when chance could explain the
        # calibration it rests on (issue 31).
        leans = key == "loop.autonomy.requireCalibration" or (key in CALIBRATED_GATES and value == autonomy.AUTO)
        rows.append(
            {
                "key": key,
                "label": LABELS[key],
                "value": value,
                "text": shown(value),
                "tier": tier,
                "own": tier == "entity",
                "widget": widget(key),
                "widen": sw.widens_family(key),
                "slug": key.replace(".", "-"),
                "doubts": doubts if leans else [],
            }
        )
    return rows


def settings_context() -> dict[str, Any]:
    manifest, commit, error = read_manifest()
    loop = manifest.get("loop") if isinstance(manifest.get("loop"), dict) else {}
    evaluation = manifest.get("evaluation") if isinstance(manifest.get("evaluation"), dict) else {}
    return {
        "commit": commit,
        "read_error": error,
        "manifest_path": sw.MANIFEST_PATH,
        "loop_on": loop.get("enabled") is not False,
        "grading_on": evaluation.get("enabled") is not False,
        "rows": manifest_rows(manifest),
        "actions": sw.actions(manifest=True, limit=SHOWN_ACTIONS),
        "target_kind": "",
        "target_id": "",
    }


def policy_context(entity: Entity) -> dict[str, Any]:
    loop = (entity.terms or {}).get("loop") or {}
    evaluation = (entity.terms or {}).get("evaluation") or {}
    own_loop = (entity.frontmatter or {}).get("loop") if isinstance(entity.frontmatter, dict) else None
    return {
        "entity": entity,
        "loop_on": bool(loop.get("enabled")),
        "switch_tier": _tier(entity.provenance or {}, "loop.enabled"),
        "own_switch": isinstance(own_loop, dict) and "enabled" in own_loop,
        "paused_file": isinstance(entity.frontmatter, dict) and entity.frontmatter.get("enabled") is False,
        "cap_owed": entity.unattended and (evaluation.get("sample") or {}).get("maxPerDay") is None,
        "resolved": resolved_rows(entity),
        "editors": entity_editors(entity),
        "actions": sw.actions(entity, limit=SHOWN_ACTIONS),
        "target_kind": entity.target_kind,
        "target_id": entity.slug,
        "reports": backtests.recent(entity),
        "periods": backtests.PERIODS,
        **{k: v for k, v in aa_panel.context(entity).items() if k != "entity"},
    }


@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    """Settings → Policy defaults: both brain-wide switches on top, an editor per knob, the manifest's action log."""
    return render(request, "evolution/settings.html", settings_context())


@login_required
def entity_policy(request: HttpRequest, target_kind: str, slug: str) -> HttpResponse:
    """The entity's Policy view: the fragment the entity page loads, or a page of its own."""
    entity = get_object_or_404(Entity, target_kind=target_kind, slug=slug)
    template = "evolution/_entity_policy.html" if request.htmx else "evolution/settings_entity.html"
    return render(request, template, policy_context(entity))


# --- Writes --------------------------------------------------------------------------------


def _request_write(request: HttpRequest) -> dict[str, Any]:
    """The write a form names: target, key, op, typed value, whether it goes through loop_widen's op, expect."""
    post = request.POST
    target = sw.target_named(post.get("targetKind") or None, post.get("targetId") or None)
    key = post.get("key", "")
    op = post.get("op", sw.SET)
    value = parse_value(key, post.get("value", "")) if op == sw.SET else None
    expect = None
    if post.get("expect"):
        try:
            expect = json.loads(post["expect"])
        except json.JSONDecodeError:
            raise sw.SettingsRefusal(sw.INVALID, "expect: not the dry run's JSON") from None
    return {"target": target, "key": key, "op": op, "value": value, "expect": expect}


def _write(request: HttpRequest, write: dict[str, Any], *, dry_run: bool) -> sw.Answer:
    """Make (or preview) the write as the signed-in person: an oversight knob through loop_widen's op."""
    actor = request.user.get_username()
    if sw.widens_family(write["key"]):
        return sw.loop_widen(
            write["target"],
            write["key"],
            write["op"],
            write["value"],
            actor=actor,
            is_agent=False,
            dry_run=dry_run,
            expect=write["expect"],
        )
    return sw.loop_set(
        write["target"],
        write["key"],
        write["op"],
        write["value"],
        actor=actor,
        dry_run=dry_run,
        expect=write["expect"],
    )


def _back(request: HttpRequest) -> HttpResponse:
    target_kind, target_id = request.POST.get("targetKind"), request.POST.get("targetId")
    if target_kind and target_id:
        entity = Entity.objects.filter(target_kind=target_kind, slug=target_id).first()
        if entity is not None:
            return redirect(entity)
    return redirect("evolution:settings")


def _answer(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
    """The fragment under the editor (HTMX), or the preview on a page of its own / a redirect with a message."""
    if request.htmx and context.get("saved"):
        # The page reloads to show the new values; the message rides along.
        messages.success(request, context["said"])
        response = HttpResponse("")
        response["HX-Refresh"] = "true"
        return response
    if request.htmx or context.get("preview"):
        template = "evolution/settings_answer.html" if request.htmx else "evolution/settings_preview.html"
        return render(request, template, context)
    (messages.success if context.get("ok") else messages.error)(request, context["said"])
    return _back(request)


@login_required
@require_POST
def preview(request: HttpRequest) -> HttpResponse:
    """Save, first step: the dry run — each file's diff and what the write widens — with a Confirm form."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only staff change the loop's settings.")
    try:
        write = _request_write(request)
        answer = _write(request, write, dry_run=True)
    except sw.SettingsRefusal as refusal:
        return _answer(request, {"ok": False, "said": refusal.detail, "code": refusal.code, "widened": refusal.widened})
    expect = {f["path"]: f["base"] for f in answer.files}
    context = {
        "ok": True,
        "preview": True,
        "answer": answer,
        "write": write,
        "raw_value": request.POST.get("value", ""),
        "expect": json.dumps(expect),
        "via_widen": sw.widens_family(write["key"]),
        "wholesale": wholesale_note(write["target"], write["key"]) if answer.changed else "",
        "backtest": backtests.for_preview(write, answer, actor=request.user.get_username()),
        "said": "" if answer.changed else "Nothing to change: the file already says so.",
        "target_kind": request.POST.get("targetKind", ""),
        "target_id": request.POST.get("targetId", ""),
    }
    return _answer(request, context)


@login_required
@require_POST
def save(request: HttpRequest) -> HttpResponse:
    """Confirm: make the write the preview showed (a kill switch is pulled from here at once)."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only staff change the loop's settings.")
    try:
        write = _request_write(request)
        answer = _write(request, write, dry_run=False)
    except sw.SettingsRefusal as refusal:
        return _answer(request, {"ok": False, "said": refusal.detail, "code": refusal.code, "widened": refusal.widened})
    if answer.commit:
        what = (
            f"{write['key']} removed" if write["op"] == sw.REMOVE else f"{write['key']} is now {words(write['value'])}"
        )
        said = f"Saved: {what} on {answer.subject} (commit {answer.commit[:12]})."
    else:
        said = "Nothing to change: the file already says so."
    return _answer(request, {"ok": True, "said": said, "answer": answer, "saved": True})


@login_required
@require_POST
def join(request: HttpRequest) -> HttpResponse:
    """Turn on: loop_join the entity (asking for the daily cap where one is owed)."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only staff change the loop's settings.")
    raw_cap = (request.POST.get("dailyCap") or "").strip()
    try:
        target = sw.target_named(request.POST.get("targetKind") or None, request.POST.get("targetId") or None)
        if raw_cap and not raw_cap.isdigit():
            raise sw.SettingsRefusal(sw.INVALID, f"dailyCap: {raw_cap!r} is not a whole number")
        answer = sw.loop_join(target, actor=request.user.get_username(), daily_cap=int(raw_cap) if raw_cap else None)
    except sw.SettingsRefusal as refusal:
        return _answer(request, {"ok": False, "said": refusal.detail, "code": refusal.code})
    if not answer.changed:
        said = f"{answer.subject} is in the loop already."
    else:
        said = f"Turned the loop on for {answer.subject}{' (resumed)' if answer.resumed else ''}: commit {answer.commit[:12]}."
    return _answer(request, {"ok": True, "said": said, "answer": answer, "saved": True})
