"""The loop's doctor sections (``manage.py doctor``): ceilings, proposers, the watch's time, evolve, prompt paths.

Registered with grading's doctor when the evolution app is ready, after
grading's own sections.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from grading.doctor import FAIL, SECTIONS, WARN, Check, DoctorContext, section
from grading.models import Entity

#: Paths under constitution/ the engine once read and reads no more (seed 003, "Loop prompt paths").
RETIRED_PROMPTS = (
    "constitution/Loop/default.md",
    "constitution/Loop/apply.md",
    "constitution/Loop/evolve.md",
    "constitution/Loop/idea.md",
    "constitution/Loop/workflow.md",
    "constitution/Loop/pipeline.md",
    "constitution/Loop/heartbeat.md",
    "constitution/Loop/chat.md",
)
#: Files under constitution/Loop/ the engine reads.
KNOWN_PROMPTS = frozenset(
    [
        f"constitution/Loop/proposer/{name}.md"
        for name in ("workflow", "pipeline", "heartbeat", "chat", "evolve", "idea")
    ]
    + ["constitution/Loop/implementer.md", "constitution/Loop/chat-privacy.md"]
)


def _label(entity: Entity) -> str:
    return f"{entity.target_kind}:{entity.slug}"


def cadence(expression: str) -> timedelta | None:
    """The gap between two fires of a five-field cron expression (None when it cannot be read)."""
    from celery.schedules import crontab

    fields = expression.split()
    if len(fields) != 5:
        return None
    minute, hour, day_of_month, month, day_of_week = fields
    try:
        schedule = crontab(
            minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month, day_of_week=day_of_week
        )
    except (ValueError, TypeError):
        return None
    moment = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
    fires = []
    for _ in range(3):
        last, delta, _now = schedule.remaining_delta(moment)
        moment = last + delta
        fires.append(moment)
    return fires[2] - fires[1]


def _in_loop(ctx: DoctorContext) -> list[Entity]:
    return [e for e in ctx.ok_entities() if e.loop_enabled]


@section("Loop ceilings")
def loop_ceilings_section(ctx: DoctorContext) -> Iterator[Check]:
    for entity in _in_loop(ctx):
        loop = entity.loop()
        if entity.unattended and loop.get("maxAnalysesPerDay") is None:
            yield Check(
                WARN,
                f"{_label(entity)} runs unattended with loop.maxAnalysesPerDay: null: "
                "nothing bounds how many analyses it pays for in a day",
            )
    yield from _monthly_ceiling(_in_loop(ctx))


def _monthly_ceiling(entities: list[Entity]) -> Iterator[Check]:
    """The entities whose loop spend this month reached ``loop.budget.maxUsdPerMonth`` (issue 16), one query."""
    from django.utils import timezone

    from evolution.core import spend

    now = timezone.now()
    refused = spend.month_refusals(entities, now=now)
    for entity in entities:
        if entity.pk in refused:
            yield Check(WARN, f"{_label(entity)}: {spend.ceiling_sentence(refused[entity.pk])}")


@section("Loop proposers")
def loop_proposers_section(ctx: DoctorContext) -> Iterator[Check]:
    from evolution.loop.pipelines import refusal

    for entity in _in_loop(ctx):
        proposer = entity.loop().get("proposer") or {}
        if proposer.get("pipeline"):
            why = refusal(entity)
            if why:
                yield Check(FAIL, f"{_label(entity)}: {why}; the loop refuses to open a cycle on it")
            elif proposer.get("modelRef"):
                yield Check(WARN, f"{_label(entity)}: loop.proposer.modelRef does nothing beside a proposer pipeline")


@section("Loop watch")
def loop_watch_section(ctx: DoctorContext) -> Iterator[Check]:
    for entity in _in_loop(ctx):
        if not entity.schedule:
            continue
        gap = cadence(entity.schedule)
        if gap is None:
            continue
        loop = entity.loop()
        watch, trigger = loop.get("watch") or {}, loop.get("trigger") or {}
        runs = int(watch.get("windowRuns") or trigger.get("windowRuns") or 5)
        lag = float(entity.evaluation().get("gradeAfterHours") or 0)
        needed = gap * runs + timedelta(hours=lag)
        deadline = timedelta(hours=float(watch.get("deadlineHours") or 336))
        if needed > deadline:
            yield Check(
                WARN,
                f"{_label(entity)}: {runs} graded runs at its schedule ({entity.schedule!r}, every "
                f"{gap.total_seconds() / 3600:g} h) plus gradeAfterHours {lag:g} take "
                f"{needed.total_seconds() / 3600:g} h, past watch.deadlineHours "
                f"{deadline.total_seconds() / 3600:g}: every change would settle unvalidated",
            )


@section("Loop evolve")
def loop_evolve_section(ctx: DoctorContext) -> Iterator[Check]:
    """Under preset evolve: quality made a guard by another objective, and quality the only metric compared."""
    for entity in _in_loop(ctx):
        if entity.loop().get("preset") != "evolve":
            continue
        metrics = entity.evaluation().get("metrics") or {}
        voting = {mid: spec for mid, spec in metrics.items() if (spec or {}).get("role") in ("objective", "guard")}
        if list(voting) == ["quality"]:
            yield Check(
                WARN,
                f"{_label(entity)} runs under preset evolve and quality is the only metric its watch compares: "
                "the loop optimises it against its own grader; declare an objective the world produces",
            )
        elif (voting.get("quality") or {}).get("role") == "guard" and any(
            spec.get("role") == "objective" for mid, spec in voting.items() if mid != "quality"
        ):
            yield Check(
                WARN,
                f"{_label(entity)}: under preset evolve the judge's quality is a guard beside its objective, so the "
                "judge's taste can veto a change that moved the number; write quality: {role: observe} to opt out",
            )


@section("Loop prompt paths")
def loop_prompt_paths_section(ctx: DoctorContext) -> Iterator[Check]:
    snapshot = ctx.snapshot()
    if snapshot is None or ctx.checkout is None:
        return
    files = ctx.checkout.files_at(snapshot.commit)
    for path in files:
        if path in RETIRED_PROMPTS or path.startswith("constitution/Improvement/"):
            yield Check(
                FAIL,
                f"{path} is at a retired path the engine never reads: delete it and carry what it changed "
                "in loop.proposer.instructions",
            )
        elif path.startswith("constitution/Loop/") and path not in KNOWN_PROMPTS:
            yield Check(WARN, f"{path} is at no path the loop reads (a misspelled prompt?)")


@section("Loop cadence")
def loop_cadence_section(ctx: DoctorContext) -> Iterator[Check]:
    """trigger.every below the hourly sweep's cadence: not refused, but looked at once an hour (seed 003)."""
    from evolution.steering.cadence import SWEEP_HOURS

    for entity in _in_loop(ctx):
        every = (entity.loop().get("trigger") or {}).get("every")
        if every is None or isinstance(every, bool):
            continue
        if float(every) < SWEEP_HOURS:
            yield Check(
                WARN,
                f"{_label(entity)}: loop.trigger.every is {float(every):g} h, finer than the loop's hourly sweep: "
                f"it is looked at once an hour, not every {float(every) * 60:g} minutes",
            )


@section("Loop groups")
def loop_groups_section(ctx: DoctorContext) -> Iterator[Check]:
    """A group name the manifest does not declare joins nothing (fail); a group fewer than two loop members join."""
    entities = ctx.ok_entities()
    declared: dict[str, dict] = {}
    for entity in entities:
        declared.update(((entity.terms or {}).get("loop") or {}).get("groups") or {})
    joined: dict[str, list[str]] = {name: [] for name in declared}
    for entity in entities:
        names = ((entity.terms or {}).get("loop") or {}).get("group") or []
        for name in names if isinstance(names, list) else []:
            if name not in declared:
                yield Check(
                    FAIL,
                    f"{_label(entity)} joins lock group {name!r}, which constitution/MANIFEST.yaml does not declare "
                    "under loop.groups: it joins nothing",
                )
            elif entity.loop_enabled:
                joined[name].append(_label(entity))
    for name, members in sorted(joined.items()):
        if len(members) < 2:
            who = ", ".join(members) or "no entity in the loop"
            yield Check(WARN, f"lock group {name} has fewer than two members in the loop ({who}): it locks nothing")


@section("Loop role memory")
def loop_role_memory_section(ctx: DoctorContext) -> Iterator[Check]:
    """A role-evaluator copy that declares memory: would let the judge's verdicts drift with what it recalls."""
    from grading.judge import ROLE_PATH, split_frontmatter

    snapshot = ctx.snapshot()
    if snapshot is None or ctx.checkout is None or not ctx.checkout.exists_at(snapshot.commit, ROLE_PATH):
        return
    try:
        frontmatter, _body = split_frontmatter(ctx.checkout.read_at(snapshot.commit, ROLE_PATH).decode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - a role file that does not read is reported, not raised
        yield Check(FAIL, f"{ROLE_PATH} does not read: {exc}")
        return
    if isinstance(frontmatter, dict) and "memory" in frontmatter:
        yield Check(
            FAIL,
            f"{ROLE_PATH} declares memory: the judge must recall nothing over what it grades "
            "(no MEMORY.md, no daily logs); remove the block",
        )


# --- Issue 29: kind support, prompt placeholders, proposer models, the loop's roles' hitl grants ------------------

SYSTEM_ROLES_DIR = "constitution/Agents/system/"
#: The loop's roles a brain may copy (an implementer is read only when the brain has one: the engine ships none).
LOOP_ROLES = {
    "proposer": "constitution/Agents/system/loop/role-proposer.md",
    "implementer": "constitution/Agents/system/loop/role-implementer.md",
}


def _system_roles(files: list[str]) -> list[str]:
    return sorted(
        p
        for p in files
        if p.startswith(SYSTEM_ROLES_DIR) and p.rsplit("/", 1)[-1].startswith("role-") and p.endswith(".md")
    )


@section("Loop kind support")
def loop_kind_support_section(ctx: DoctorContext) -> Iterator[Check]:
    """Loop blocks in the engine's system roles grade and improve nothing (R22.13); evaluation.context on a scenario
    or a heartbeat is read by nothing (R22.17)."""
    from singularity.brain import frontmatter
    from singularity.errors import ConfigError

    snapshot = ctx.snapshot()
    if snapshot is not None and ctx.checkout is not None:
        for path in _system_roles(ctx.checkout.files_at(snapshot.commit)):
            try:
                data, _body = frontmatter.parse(ctx.checkout.read_at(snapshot.commit, path).decode("utf-8"), path=path)
            except (ConfigError, UnicodeDecodeError) as exc:
                yield Check(FAIL, f"{path} does not read: {exc}")
                continue
            blocks = [f"{name}:" for name in ("evaluation", "loop") if name in data]
            if blocks:
                yield Check(
                    FAIL,
                    f"{path} declares {' and '.join(blocks)}, but an engine system role is no entity: it is graded "
                    "and improved by nothing. Move the persona into a feature (features/<feature>/<id>.agent.md) "
                    "and declare the blocks there",
                )
    for entity in ctx.ok_entities():
        own = (entity.frontmatter or {}).get("evaluation")
        if entity.kind != Entity.Kind.ROLE and isinstance(own, dict) and "context" in own:
            yield Check(
                WARN,
                f"{_label(entity)} declares evaluation.context, which only a chat episode's judge reads: "
                f"it does nothing on a {entity.kind}",
            )


@section("Loop prompt placeholders")
def loop_prompt_placeholders_section(ctx: DoctorContext) -> Iterator[Check]:
    """A brain copy of a loop prompt naming a placeholder the loop does not fill in that brief (R8.32)."""
    from evolution.core import prompts

    snapshot = ctx.snapshot()
    if snapshot is None or ctx.checkout is None:
        return
    for path in ctx.checkout.files_at(snapshot.commit):
        module = prompts.module_at(path)
        if module is None:
            continue
        text = ctx.checkout.read_at(snapshot.commit, path).decode("utf-8", "replace")
        why = prompts.refusal(module, text)
        if why:
            yield Check(FAIL, f"{why}: the brief refuses it, so every analysis reading it fails")


def _nearest(name: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else f"; the gateway serves {', '.join(sorted(known)[:10])}"


@section("Loop proposer models")
def loop_proposer_models_section(ctx: DoctorContext) -> Iterator[Check]:
    """A loop.proposer.modelRef the gateway does not serve: every analysis of the entity would fail (R8.36)."""
    from django.conf import settings

    from singularity.errors import UpstreamError
    from singularity.gateway import get_gateway, is_demo

    named = [
        (entity, str(proposer["modelRef"]))
        for entity in _in_loop(ctx)
        if (proposer := entity.loop().get("proposer") or {}).get("modelRef") and not proposer.get("pipeline")
    ]
    if not named or is_demo():
        return
    try:
        with get_gateway() as gateway:
            served = gateway.served_models()
    except UpstreamError as exc:
        yield Check(WARN, f"the gateway's model list cannot be read, so no loop.proposer.modelRef is checked: {exc}")
        return
    if not served:
        return
    known = sorted({*served, settings.BRAMA_MODEL})
    for entity, model in named:
        if model not in served:
            yield Check(
                FAIL,
                f"{_label(entity)}: loop.proposer.modelRef {model!r} is not a model the gateway serves: every "
                f"analysis of it would fail before it starts{_nearest(model, known)}",
            )


def _role_grants(checkout: Any, commit: str) -> Iterator[tuple[str, str, set[str]]]:
    """(role, its file, its grant ∪ role-general's) for each loop role the engine runs."""
    from evolution.loop.proposer import BUNDLED_ROLE
    from singularity.brain.capabilities import GENERAL_ROLE_PATH, grant_of

    general: set[str] = set()
    if checkout.exists_at(commit, GENERAL_ROLE_PATH):
        general = grant_of(checkout.read_at(commit, GENERAL_ROLE_PATH).decode("utf-8"), path=GENERAL_ROLE_PATH)
    for role, path in LOOP_ROLES.items():
        if checkout.exists_at(commit, path):
            yield role, path, grant_of(checkout.read_at(commit, path).decode("utf-8"), path=path) | general
        elif role == "proposer":
            engine = f"engine:{BUNDLED_ROLE.name}"
            yield role, engine, grant_of(BUNDLED_ROLE.read_text(encoding="utf-8"), path=engine) | general


def _hitl_grants(ctx: DoctorContext) -> Iterator[Check]:
    """Once any entity decides auto: each hitl: true capability the proposer or implementer reaches (R12.21)."""
    from singularity.brain.capabilities import CAPABILITIES_PATH, hitl_catalogue, reached
    from singularity.errors import ConfigError

    unattended = [_label(e) for e in _in_loop(ctx) if e.loop()["autonomy"]["decide"] == "auto"]
    snapshot = ctx.snapshot()
    if not unattended or snapshot is None or ctx.checkout is None:
        return
    try:
        catalogue = hitl_catalogue(ctx.checkout, snapshot.commit)
        grants = list(_role_grants(ctx.checkout, snapshot.commit))
    except (ConfigError, UnicodeDecodeError) as exc:
        yield Check(FAIL, f"the loop roles' grants cannot be read: {exc}")
        return
    who = ", ".join(unattended[:3]) + (f" and {len(unattended) - 3} more" if len(unattended) > 3 else "")
    for role, path, grant in grants:
        for capability in reached(grant, catalogue):
            yield Check(
                WARN,
                f"the {role} role ({path}) reaches {capability} (hitl: true), and {who} decide auto: an unattended "
                f"turn cannot ask for it, so a round needing it fails — relax it with hitl: false in "
                f"{CAPABILITIES_PATH}, or drop it from your copy of the role",
            )


def _with_hitl_grants(base: Any) -> Any:
    def loop_autonomy_section(ctx: DoctorContext) -> Iterator[Check]:
        yield from base(ctx)
        yield from _hitl_grants(ctx)

    return loop_autonomy_section


# grading's "Loop autonomy" names the rest of the seed's list; the loop's roles are the loop's to read (same place
# in the doctor's order, the seed's section name).
SECTIONS["Loop autonomy"] = _with_hitl_grants(SECTIONS["Loop autonomy"])


@section("Loop power")
def loop_power_section(ctx: DoctorContext) -> Iterator[Check]:
    """What a verdict could see, before it happens (issue 31): a check whose tolerance leaves no gain that could
    validate, and a repair watch that would revert the unchanged entity by chance more often than 1 in 10."""
    for entity in _in_loop(ctx):
        yield from _check_power(entity)
        yield from _watch_chance(entity)


#: A repair watch firing by chance more often than this, at the entity's own failure rate, is named.
CHANCE_CEILING = 0.1


def _check_power(entity: Entity) -> Iterator[Check]:
    from evolution.presets import power
    from grading.metrics import tolerance_band

    if entity.kind != Entity.Kind.WORKFLOW or entity.loop()["check"].get("mode") == "none":
        return
    terms = entity.terms or {}
    found = power._objective(terms)
    if found is None:
        return
    metric_id, spec = found
    check = entity.loop()["check"]
    inputs = int(check.get("inputs") or 5)
    trials = max(1, min(3, int(check.get("trials") or 1)))
    values = _recent_values(entity, metric_id)
    base = sum(values) / len(values) if values else None
    tolerance = tolerance_band(spec, terms, base)
    binary = power.two_valued(spec, values) if values else False
    how = "mean" if spec.get("aggregate") == "mean" else "median"
    n = inputs * trials
    smallest = power.smallest_gain(n, tolerance, two_valued=binary, how=how)
    span = 1  # run metrics land normalised to 0..1 (a share, a scale); a gain past the whole range shows nothing
    if smallest is None or smallest > span:
        yield Check(
            WARN,
            f"{_label(entity)}: check.inputs {inputs} × trials {trials} with {metric_id}'s tolerance ±{tolerance:g}: "
            f"no gain can validate — {power.gain_words(n, 'pair', smallest, tolerance, binary=binary)}; every "
            "check comes back unvalidated: lower the tolerance or raise check.inputs to three or more",
        )


def _recent_values(entity: Entity, metric_id: str, limit: int = 50) -> list:
    from decimal import Decimal

    from grading.metrics import to_number
    from grading.models import Grade

    rows = Grade.objects.filter(entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False).order_by(
        "-graded_at"
    )[:limit]
    values = [to_number((metrics or {}).get(metric_id)) for metrics in rows.values_list("metrics", flat=True)]
    return [Decimal(str(v)) for v in values if v is not None]


def _watch_chance(entity: Entity) -> Iterator[Check]:
    from django.utils import timezone

    from evolution.loop import watch
    from evolution.presets import power

    loop = entity.loop()
    if (loop.get("preset") or "repair") != "repair" or (loop.get("watch") or {}).get("mode") == "none":
        return
    runs, failures = watch.sizes(entity)
    rate, over = watch.failure_rate(entity, before=timezone.now())
    if rate is None:
        return
    chance = power.chance_of_firing(runs, failures, rate)
    if chance > CHANCE_CEILING:
        yield Check(
            WARN,
            f"{_label(entity)}: its repair watch regresses at {failures} bad of {runs} graded runs; at its own failure "
            f"rate {float(rate):.2g} (its last {over} graded runs) an unchanged entity would be reverted "
            f"{round(float(chance) * 100)}% of the time — widen watch.windowRuns and raise watch.minFailures until "
            "chance fires it less than 1 in 10",
        )
