"""Which loosenings of spend, the pre-merge check and the watch a settings write makes (issue 27).

The seed's own judged families (autonomy, the change perimeter, the loop
switch: ``oversight.knob_widenings``) are refused by loop_set and made by
loop_widen once a person approves. The families here weaken a guard less
directly — the seed leaves them to loop_set — so a person's write makes them
at once, and an agent's waits on a person's card whichever verb it called.

Each knob is judged on resolved values (the engine, the manifest and the
entity's own block merged), before and after, for every entity the write
reaches, and for a brain-tier write on the brain tier itself too. The
direction of each knob is in ``KNOBS``; docs/decisions.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from singularity.brain.loader import MANIFEST_PATH, BrainSnapshot, EntityDefinition
from singularity.brain.terms import TermsError, metric_band, resolve_terms

SPEND, CHECK, WATCH = "spend", "check", "watch"

#: How a knob loosens: a ceiling raised or removed (None: no ceiling), a number raised, a number lowered,
#: a rank lowered (``RANKS``).
CEILING, HIGHER, LOWER, RANK = "ceiling", "higher", "lower", "rank"

#: Ranked knobs: from the weakest guard (0) up; a fall loosens. check.mode null derives (replay or none).
RANKS: dict[str, dict[Any, int]] = {
    "loop.check.mode": {"none": 0, None: 1, "replay": 2},
    "loop.watch.mode": {"none": 0, "observe": 1},
}


def _at(terms: dict[str, Any], dotted: str) -> Any:
    node: Any = terms
    for name in dotted.split("."):
        node = node.get(name) if isinstance(node, dict) else None
    return node


def _watch_or_trigger(name: str) -> Callable[[dict[str, Any]], Any]:
    """The watch's own number, or the trigger's when it names none (the seed: the watch's window is the trigger's)."""

    def read(terms: dict[str, Any]) -> Any:
        own = _at(terms, f"loop.watch.{name}")
        return own if own is not None else _at(terms, f"loop.trigger.{name}")

    return read


@dataclass(frozen=True)
class Knob:
    """One judged knob: its family, its dotted name, how it loosens, and how its effective value is read."""

    family: str
    key: str
    way: str
    read: Callable[[dict[str, Any]], Any] | None = None

    def value(self, terms: dict[str, Any]) -> Any:
        return self.read(terms) if self.read is not None else _at(terms, self.key)


KNOBS: tuple[Knob, ...] = (
    # Spend: what the loop and grading may spend.
    Knob(SPEND, "loop.budget.maxUsdPerRun", CEILING),
    Knob(SPEND, "loop.budget.maxUsdPerMonth", CEILING),
    Knob(SPEND, "loop.maxAnalysesPerDay", CEILING),
    Knob(SPEND, "loop.evidence.maxTokens", HIGHER),
    Knob(SPEND, "evaluation.sample.rate", HIGHER),
    Knob(SPEND, "evaluation.sample.maxPerDay", CEILING),
    Knob(SPEND, "evaluation.context.maxTokens", HIGHER),
    # The pre-merge check: off, fewer inputs or trials, wider tolerances (metrics below).
    Knob(CHECK, "loop.check.mode", RANK),
    Knob(CHECK, "loop.check.inputs", LOWER),
    Knob(CHECK, "loop.check.trials", LOWER),
    Knob(CHECK, "evaluation.metricTolerance.judged", HIGHER),
    Knob(CHECK, "evaluation.metricTolerance.computedPct", HIGHER),
    # The watch: off, fewer runs, more failures before a regression, a shorter deadline.
    Knob(WATCH, "loop.watch.mode", RANK),
    Knob(WATCH, "loop.watch.windowRuns", LOWER, _watch_or_trigger("windowRuns")),
    Knob(WATCH, "loop.watch.minFailures", HIGHER, _watch_or_trigger("minFailures")),
    Knob(WATCH, "loop.watch.deadlineHours", LOWER),
)


def _number(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def loosens(knob: Knob, old: Any, new: Any) -> bool:
    """Whether ``old`` → ``new`` loosens ``knob`` (``KNOBS``' direction; an unreadable value loosens nothing)."""
    if old == new:
        return False
    if knob.way == RANK:
        ranks = RANKS[knob.key]
        return ranks.get(new, 0) < ranks.get(old, 0)
    if knob.way == CEILING and new is None:
        return old is not None  # the ceiling removed
    before, after = _number(old), _number(new)
    if knob.way == CEILING and old is None:
        return False  # a ceiling where there was none
    if before is None or after is None:
        return False
    return after > before if knob.way in (CEILING, HIGHER) else after < before


def _metric_bands(terms: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    evaluation = terms.get("evaluation") or {}
    metrics = evaluation.get("metrics") or {}
    bands: dict[str, tuple[Any, Any]] = {}
    for metric_id, metric in metrics.items():
        if isinstance(metric, dict) and "metricTolerance" in evaluation:
            bands[metric_id] = metric_band(metric, evaluation)
    return bands


def _wider(old: tuple[Any, Any], new: tuple[Any, Any]) -> bool:
    """A metric's band widens when an axis gains slack or grows (an axis dropped is a narrowing)."""
    for before, after in zip(old, new, strict=True):
        b, a = _number(before), _number(after)
        if a is not None and (b is None or a > b):
            return True
    return False


def knob_loosenings(subject: str, before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The loosenings between two resolved terms of one tier: [{subject, knob, family, from, to}]."""
    found: list[dict[str, Any]] = []
    for knob in KNOBS:
        old, new = knob.value(before), knob.value(after)
        if loosens(knob, old, new):
            found.append({"subject": subject, "knob": knob.key, "family": knob.family, "from": old, "to": new})
    bands_before, bands_after = _metric_bands(before), _metric_bands(after)
    for metric_id in sorted(set(bands_before) & set(bands_after)):
        old_band, new_band = bands_before[metric_id], bands_after[metric_id]
        # A band the defaults widened is named once, by metricTolerance, above.
        if _wider(old_band, new_band) and not _default_band(before, after, metric_id):
            found.append(
                {
                    "subject": subject,
                    "knob": f"evaluation.metrics.{metric_id}.tolerance",
                    "family": CHECK,
                    "from": list(old_band),
                    "to": list(new_band),
                }
            )
    return found


def _default_band(before: dict[str, Any], after: dict[str, Any], metric_id: str) -> bool:
    """Whether the metric takes its band from metricTolerance on both sides (so that knob names the change)."""

    def owns(terms: dict[str, Any]) -> bool:
        metric = _at(terms, f"evaluation.metrics.{metric_id}") or {}
        return metric.get("tolerance") is not None or metric.get("tolerancePct") is not None

    return not owns(before) and not owns(after)


def _brain_terms(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The brain tier's own resolved terms (the manifest over the engine), None when it does not load."""
    try:
        terms, _ = resolve_terms("workflow", manifest, {}, entity_label=MANIFEST_PATH)
    except TermsError:
        return None
    return terms


def loosenings(
    before: BrainSnapshot, after: BrainSnapshot, definition: EntityDefinition | None
) -> list[dict[str, Any]]:
    """Every loosening of spend, the check or the watch the write makes: the brain tier's own (a manifest
    write), then each entity's it reaches, judged on resolved values."""
    found: list[dict[str, Any]] = []
    if definition is None:
        then, now = _brain_terms(before.manifest), _brain_terms(after.manifest)
        if then is not None and now is not None:
            found.extend(knob_loosenings(MANIFEST_PATH, then, now))
        reached = [(e.target_kind, e.slug) for e in after.entities]
    else:
        reached = [(definition.target_kind, definition.slug)]
    for kind, slug in reached:
        old, new = before.entity(kind, slug), after.entity(kind, slug)
        if old is None or new is None or not old.ok or not new.ok:
            continue
        found.extend(knob_loosenings(f"{kind}:{slug}", old.terms, new.terms))
    return found
