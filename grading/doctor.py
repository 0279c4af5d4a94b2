"""``manage.py doctor``: named checks of the brain and its entities, each line pass, warn or fail.

A section is a function registered with ``@section("Name")`` that yields
``Check`` lines from a ``DoctorContext`` (the entity rows, the brain snapshot
at the checkout's head, loop modules imported on demand). A section that
yields nothing reports one pass line; a section that raises reports a fail
naming the exception, so a broken check is never silent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from grading.models import Entity
from singularity.brain.git import Checkout
from singularity.brain.loader import BrainSnapshot, load_brain
from singularity.brain.modules import BrainModule, BrainModuleError, load_at
from singularity.errors import SingularityError

PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True)
class Check:
    level: str
    message: str


@dataclass(frozen=True)
class Finding:
    section: str
    level: str
    message: str

    def line(self) -> str:
        return f"[{self.level}] {self.section}: {self.message}"


SectionFn = Callable[["DoctorContext"], Iterable[Check]]
SECTIONS: dict[str, SectionFn] = {}


def section(name: str) -> Callable[[SectionFn], SectionFn]:
    """Register ``fn`` as the doctor section ``name`` (run in registration order)."""

    def register(fn: SectionFn) -> SectionFn:
        SECTIONS[name] = fn
        return fn

    return register


@dataclass
class DoctorContext:
    """What the sections read: present entity rows, the brain at the checkout's head, loop modules."""

    checkout: Checkout | None = None
    _snapshot: BrainSnapshot | None = None
    snapshot_error: str = ""
    _loaded: bool = False
    _modules: dict[int, tuple[BrainModule | None, str]] = field(default_factory=dict)

    def entities(self) -> list[Entity]:
        return list(Entity.objects.filter(present=True).order_by("target_kind", "slug"))

    def ok_entities(self) -> list[Entity]:
        return [e for e in self.entities() if e.ok and e.terms]

    def snapshot(self) -> BrainSnapshot | None:
        """The brain loaded at the checkout's head, or None (``snapshot_error`` says why)."""
        if not self._loaded:
            self._loaded = True
            try:
                if self.checkout is None:
                    from grading.sync import current_checkout

                    self.checkout = current_checkout()
                self._snapshot = load_brain(self.checkout, self.checkout.head())
            except SingularityError as exc:
                self.snapshot_error = str(exc)
        return self._snapshot

    def manifest(self) -> dict[str, Any]:
        snapshot = self.snapshot()
        return snapshot.manifest if snapshot is not None else {}

    def loop_module(self, entity: Entity) -> tuple[BrainModule | None, str]:
        """The entity's loop module imported at its commit, or (None, why) when it has none or it will not import."""
        if entity.pk not in self._modules:
            if not entity.loop_module_path:
                self._modules[entity.pk] = (None, "")
            elif self.snapshot() is None or self.checkout is None:
                self._modules[entity.pk] = (None, f"the brain cannot be read: {self.snapshot_error}")
            else:
                try:
                    module = load_at(self.checkout, entity.commit, entity.loop_module_path)
                    self._modules[entity.pk] = (module, "")
                except BrainModuleError as exc:
                    self._modules[entity.pk] = (None, str(exc))
        return self._modules[entity.pk]


def run_doctor(*, checkout: Checkout | None = None, only: Iterable[str] | None = None) -> list[Finding]:
    """Run every registered section (or those named in ``only``) and return their findings in order."""
    ctx = DoctorContext(checkout=checkout)
    names = list(only) if only is not None else list(SECTIONS)
    findings: list[Finding] = []
    for name in names:
        fn = SECTIONS[name]
        try:
            checks = list(fn(ctx))
        except Exception as exc:  # noqa: BLE001 - a broken check is reported, never silent
            checks = [Check(FAIL, f"the check itself failed: {type(exc).__name__}: {exc}")]
        if not checks:
            checks = [Check(PASS, "nothing to report")]
        findings.extend(Finding(name, check.level, check.message) for check in checks)
    return findings


def _label(entity: Entity) -> str:
    return f"{entity.target_kind}:{entity.slug}"


def _unattended_why(entity: Entity) -> str:
    if entity.kind == Entity.Kind.HEARTBEAT:
        return "a heartbeat"
    if entity.kind == Entity.Kind.ROLE:
        return "a chat role"
    return f"a scenario on schedule {entity.schedule!r}"


def _dotted_keys(block: Any, prefix: str = "") -> list[str]:
    if not isinstance(block, dict):
        return [prefix] if prefix else []
    keys: list[str] = []
    for name, value in block.items():
        path = f"{prefix}.{name}" if prefix else name
        keys.extend(_dotted_keys(value, path) if isinstance(value, dict) else [path])
    return keys


def _dropped(manifest_block: Any, entity_block: Any) -> list[str]:
    """The keys the manifest writes that an entity's wholesale block leaves out (and so reads from the engine)."""
    if not isinstance(manifest_block, dict) or not isinstance(entity_block, dict):
        return []
    written = set(_dotted_keys(entity_block))
    return [key for key in _dotted_keys(manifest_block) if key not in written]


# ---------------------------------------------------------------------------
# Sections.


@section("Brain")
def brain_section(ctx: DoctorContext) -> Iterator[Check]:
    snapshot = ctx.snapshot()
    if snapshot is None:
        yield Check(FAIL, f"the brain cannot be read: {ctx.snapshot_error}")
        return
    for message in snapshot.errors:
        yield Check(FAIL, message)
    for method in snapshot.methods.values():
        if method.error:
            yield Check(FAIL, f"method {method.name}: {method.error}")
    entities = ctx.entities()
    broken = [e for e in entities if e.load_error]
    for entity in broken:
        yield Check(FAIL, f"{_label(entity)} does not load: {entity.load_error}")
    for entity in ctx.ok_entities():
        method = entity.evaluation().get("method")
        if entity.evaluation_enabled and method != "none" and method not in snapshot.methods:
            yield Check(
                FAIL,
                f"{_label(entity)}: evaluation.method {method!r} names no file "
                f"constitution/Evaluation/Methods/{method}.md: every grading of it fails",
            )
    stale = sorted({e.commit[:12] for e in entities if e.commit and e.commit != snapshot.commit})
    if not entities and snapshot.entities:
        yield Check(WARN, "no entity rows yet: run `manage.py brain sync`")
    elif stale:
        yield Check(WARN, f"rows from {', '.join(stale)} while the brain is at {snapshot.commit[:12]}: a sync is due")
    if not snapshot.errors and not broken:
        yield Check(PASS, f"{len(entities)} entities load at {snapshot.commit[:12]}")


@section("Eval ceilings")
def eval_ceilings_section(ctx: DoctorContext) -> Iterator[Check]:
    for entity in ctx.ok_entities():
        evaluation, loop = entity.evaluation(), entity.loop()
        if not entity.evaluation_enabled or evaluation["method"] == "none":
            continue
        if entity.unattended and evaluation["sample"]["maxPerDay"] is None:
            yield Check(
                WARN,
                f"{_label(entity)} is unattended ({_unattended_why(entity)}) with evaluation on and no "
                "sample.maxPerDay at any tier: it keeps running and none of its runs is graded",
            )
        lag = evaluation["gradeAfterHours"]
        deadline = loop["watch"]["deadlineHours"]
        if entity.loop_enabled and lag >= deadline:
            yield Check(
                WARN,
                f"{_label(entity)}: gradeAfterHours {lag:g} is not inside watch.deadlineHours {deadline:g}: "
                "no graded run can land before the watch closes, so every change settles unvalidated",
            )


@section("Loop modules")
def loop_modules_section(ctx: DoctorContext) -> Iterator[Check]:
    for entity in ctx.ok_entities():
        metrics = entity.evaluation()["metrics"]
        owed = sorted(
            mid
            for mid, spec in metrics.items()
            if not spec["catalog"] and spec["kind"] == "computed" and spec["scope"] == "run"
        )
        module, error = ctx.loop_module(entity)
        if error:
            yield Check(FAIL, f"{_label(entity)}: loop module {entity.loop_module_path} does not import: {error}")
        elif owed and entity.evaluation_enabled and not entity.loop_module_path:
            yield Check(
                FAIL,
                f"{_label(entity)} declares computed metrics {', '.join(owed)} and has no loop module "
                f"({entity.slug}.loop.py beside its file): every evaluation of it fails naming them",
            )
        loop = entity.loop()
        judged_period = sorted(
            mid for mid, spec in metrics.items() if spec["scope"] == "period" and spec["role"] in ("objective", "guard")
        )
        has_compare = module is not None and callable(getattr(module.module, "compare", None))
        if judged_period and loop["preset"] == "repair" and not has_compare:
            yield Check(
                WARN,
                f"{_label(entity)}: period metric(s) {', '.join(judged_period)} have a verdict role under preset "
                "repair with no compare(): the repair comparator counts bad runs and never reads them — write a "
                "compare, use preset evolve, or make them role observe",
            )


def _own_check_mode(entity: Entity) -> Any:
    """The ``loop.check.mode`` the entity's own frontmatter declares (None when it declares none)."""
    loop = (entity.frontmatter or {}).get("loop")
    check = loop.get("check") if isinstance(loop, dict) else None
    return check.get("mode") if isinstance(check, dict) else None


def _distinct_inputs(entity: Entity, scan: int = 2000) -> tuple[list[str], list[str]]:
    """(every distinct input among the newest graded runs, the inputs of the newest evidence.runs of them)."""
    import json

    from grading.models import Grade

    loop = entity.loop()
    evidence = int(((loop.get("evidence") or {}).get("runs")) or 10)
    inputs = list(
        Grade.objects.filter(entity=entity, status=Grade.Status.GRADED, execution__loop_launched=False)
        .order_by("-execution__completed_at")
        .values_list("execution__input", flat=True)[:scan]
    )
    keys = [json.dumps(value, sort_keys=True, default=str) for value in inputs]
    return list(dict.fromkeys(keys)), list(dict.fromkeys(keys[:evidence]))


def _check_capacity(ctx: DoctorContext, entity: Entity) -> Iterator[Check]:
    """Enough distinct inputs to freeze, and a held-out one possible (seed 003, "What a cycle freezes")."""
    terms = entity.loop()["check"]
    wanted = int(terms.get("inputs") or 5)
    module, _why = ctx.loop_module(entity)
    cases = getattr(module, "CASES", None) if module is not None else None
    golden = len(cases) if isinstance(cases, list | tuple) else 0
    distinct, seen = _distinct_inputs(entity)
    if len(distinct) + golden < wanted:
        yield Check(
            WARN,
            f"{_label(entity)}: {len(distinct)} distinct graded input(s) and {golden} golden case(s) to freeze, fewer "
            f"than check.inputs {wanted}: the check's set comes up thin until the entity has run on more",
        )
    if wanted < 2 or (distinct and len(seen) >= len(distinct)):
        why = (
            "check.inputs is below 2" if wanted < 2 else "the proposer's evidence.runs cover every input it has run on"
        )
        yield Check(
            WARN,
            f"{_label(entity)}: hint: no held-out input is possible ({why}), so every input the candidate is checked "
            "on is one its proposer was shown and the check cannot tell a fix from a fit — raise check.inputs above "
            "the distinct inputs the entity has run on, or lower evidence.runs",
        )


@section("Loop check")
def loop_check_section(ctx: DoctorContext) -> Iterator[Check]:
    for entity in ctx.ok_entities():
        if not entity.loop_enabled:
            continue
        own = _own_check_mode(entity)
        if entity.kind in (Entity.Kind.HEARTBEAT, Entity.Kind.PIPELINE) and own == "replay":
            yield Check(
                FAIL,
                f"{_label(entity)}: declares check.mode replay, but a {entity.kind} is never re-run to measure a change "
                "(it measures nothing): remove it; the watch judges this entity after the merge",
            )
            continue
        if entity.kind != Entity.Kind.WORKFLOW:
            continue
        if entity.loop()["check"]["mode"] == "none":
            yield Check(
                WARN,
                f"{_label(entity)}: a replayable workflow that declares check.mode none: its changes merge with no "
                "pre-merge check on frozen inputs, judged only by the watch afterwards",
            )
            continue
        yield from _check_capacity(ctx, entity)
        metrics = entity.evaluation()["metrics"]
        reported = sorted(mid for mid, s in metrics.items() if s["kind"] == "reported" and s["role"] == "objective")
        if reported:
            yield Check(
                WARN,
                f"{_label(entity)}: reported objective {', '.join(reported)} on a workflow whose check replays: "
                "nobody rates a replay, so every check comes back inconclusive and autonomy.onInconclusive "
                "decides every cycle",
            )
        objectives = [s for s in metrics.values() if s["role"] == "objective"]
        if objectives and all(s["scope"] == "period" for s in objectives):
            yield Check(
                WARN,
                f"{_label(entity)}: its only objective is period-scoped, so its check is guards-only: it can show "
                "that nothing broke, never that the change worked",
            )


@section("Human calibration")
def human_calibration_section(ctx: DoctorContext) -> Iterator[Check]:
    manifest_human = (ctx.manifest().get("evaluation") or {}).get("human")
    for entity in ctx.ok_entities():
        own = (entity.frontmatter.get("evaluation") or {}).get("human")
        dropped = _dropped(manifest_human, own)
        if dropped:
            yield Check(
                WARN,
                f"{_label(entity)}: its partial evaluation.human block drops {', '.join(dropped)} from the manifest "
                "(the block is replaced whole; keys it leaves out come from the engine)",
            )
        evaluation = entity.evaluation()
        human_judged = [mid for mid, s in evaluation["metrics"].items() if s["kind"] == "judged" and s["human"]]
        if entity.loop()["autonomy"]["requireCalibration"] and not human_judged:
            yield Check(
                WARN,
                f"{_label(entity)}: autonomy.requireCalibration holds nothing: it declares no judged human: true metric",
            )
        reported = [mid for mid, s in evaluation["metrics"].items() if s["kind"] == "reported"]
        if reported and evaluation["human"]["ask"] == "until-calibrated":
            yield Check(
                PASS,
                f"{_label(entity)}: reported metric(s) {', '.join(reported)} under until-calibrated: every graded "
                "run is carded (no judge ever stands in for people there)",
            )


@section("Loop autonomy")
def loop_autonomy_section(ctx: DoctorContext) -> Iterator[Check]:
    manifest_autonomy = (ctx.manifest().get("loop") or {}).get("autonomy")
    for entity in ctx.ok_entities():
        own = (entity.frontmatter.get("loop") or {}).get("autonomy")
        dropped = _dropped(manifest_autonomy, own)
        if dropped:
            yield Check(
                WARN,
                f"{_label(entity)}: its partial loop.autonomy block drops {', '.join(dropped)} from the manifest "
                "(the block is replaced whole; keys it leaves out come from the engine)",
            )
        if not entity.loop_enabled:
            continue
        autonomy = entity.loop()["autonomy"]
        if entity.unattended and autonomy["maxConsecutiveRegressions"] is None:
            yield Check(
                WARN,
                f"{_label(entity)} is unattended and sets autonomy.maxConsecutiveRegressions null: "
                "no regression streak ever pauses it",
            )
        if (
            autonomy["merge"] == "auto"
            and autonomy["onInconclusive"] == "ship"
            and autonomy["onUnmeasured"] == "continue"
        ):
            yield Check(
                WARN,
                f"{_label(entity)}: merge auto with onInconclusive ship and onUnmeasured continue — "
                "nothing stops on “we don't know” any more",
            )
        if autonomy["decide"] == "auto" and autonomy["merge"] == "auto":
            compared = [
                mid
                for mid, s in entity.evaluation()["metrics"].items()
                if mid != "quality" and s["role"] in ("objective", "guard")
            ]
            if not compared:
                yield Check(
                    WARN,
                    f"{_label(entity)}: decide and merge auto, judged by quality alone — autonomy judged by a single "
                    "scalar is blind; declare metrics first",
                )


@section("OTLP traces")
def otlp_traces_section(ctx: DoctorContext) -> Iterator[Check]:
    from grading.otlp_assemble import error_in_short, set_aside
    from singularity.display import instant_text

    count = set_aside().count()
    if not count:
        return
    first = set_aside().order_by("assembled_at", "pk").first()
    assert first is not None
    yield Check(
        WARN,
        f"{count:,} trace(s) sent to /v1/traces could not become runs: each is set aside with its spans and no "
        f"sweep takes it again (listed on the Entities page). The first: trace {first.trace_id} of "
        f"{_label(first.entity)}, set aside {instant_text(first.assembled_at)}: {error_in_short(first.assembly_error)}",
    )
