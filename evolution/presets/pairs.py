"""The pre-merge check's comparator: the pairs, the judge's health, and the engine's rules in their order.

Seed 003, "What the check does" and "The verdict, as a list of rules", with
the rule list DESIGN.md rules (the seed's text lost it). A pair is one trial
of one frozen input: the incumbent's side (its frozen grade, or a fresh
replay at the base) beside the candidate's (a replay at the PR's head). Each
side is one of

- ``viable`` — graded under the cycle's judge and passed, with its vector;
- ``failed`` — graded and did not pass (a vector, read as a failing run);
- ``ungraded`` — finished, but the judge could not grade it (or another judge did);
- ``notRun`` — the replay died before the judge saw it (its plan would not load, it crashed);
- ``unfinished`` — still running or waiting for its grade.

Before any comparator (``health``): more than ``maxUngradedShare`` of the
candidate's sides ungraded → inconclusive ("judge unhealthy"); no incumbent
side graded on any input → inconclusive ("no bar"). Then the engine's rules
(``engine_verdict``) stop at the first that answers:

(a) viability — fewer than two thirds of the pairs judged → unvalidated;
(c) lost inputs — an input the incumbent held where the candidate failed or
    did not run on most trials → regressed, naming the inputs;
(d) a ``critical`` metric past its tolerance on any single input → regressed;
(e) a guard whose median movement is past its tolerance → regressed;
(f) the candidate's median of an objective or guard below its floor, where the incumbent's median over the
    same pairs held it → regressed (a change is blamed only for a floor the incumbent held);
(g) a ``mustImprove`` objective unmeasured, or not gaining beyond the band → unvalidated;
(g′) an objective's movement above the band → validated, below −band →
     regressed, inside → unvalidated ("within noise");
(g″) a run-scoped objective the check cannot measure — ``kind: reported`` (people rate it; nobody rates a
     replay), or, with no objective measured at all, one the replays left out → inconclusive (R4.12);
(h) no objective measured on both sides, no veto → validated (guards only: a period-scoped objective).

A metric's movement is the median (the mean under ``aggregate: mean``) of
candidate − incumbent per pair, in its own direction, over the pairs where
both sides measured it. The band is half the range of those movements,
never tighter than the metric's tolerance; below three pairs, the tolerance
alone. Period metrics are never read here (nobody measured them per run).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from grading.metrics import aggregate, movement, specs, to_number, tolerance_band
from singularity.display import outcome_word

VIABLE, FAILED, UNGRADED, NOT_RUN, UNFINISHED = "viable", "failed", "ungraded", "notRun", "unfinished"
STATES = (VIABLE, FAILED, UNGRADED, NOT_RUN, UNFINISHED)
GRADED = (VIABLE, FAILED)
#: A side's state as a person reads it (the Check chapter, the comment on a closed PR).
STATE_WORDS = {
    VIABLE: outcome_word(True),
    FAILED: outcome_word(False),
    UNGRADED: "ungraded",
    NOT_RUN: "did not run",
    UNFINISHED: "waiting",
}
VERDICTS = ("validated", "regressed", "unvalidated")
#: Rule (a): at least this share of the pairs must be judged.
VIABLE_SHARE = Decimal(2) / Decimal(3)
#: Below this many compared pairs the band is the tolerance alone.
MIN_SPREAD_PAIRS = 3


class VerdictFault(Exception):
    """A brain's verdict() that raised or answered a shape the engine cannot read: the check is inconclusive."""


@dataclass
class Side:
    state: str
    vector: dict[str, Any] | None = None
    #: The replay's execution id; for a frozen incumbent score, the history run it came from.
    run_id: str | None = None
    frozen: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"state": self.state, "vector": self.vector, "runId": self.run_id, "frozen": self.frozen}


@dataclass
class Pair:
    slot: int
    trial: int
    #: The frozen input as a person reads it: the history run id or the case id, and its first 60 characters.
    source: str
    label: str
    held_out: bool
    golden: bool
    input: Any
    baseline: Side
    candidate: Side

    @property
    def judged(self) -> bool:
        """Both sides finished and graded, or the candidate did not run (the change failing that run)."""
        return self.candidate.state == NOT_RUN or (self.candidate.state in GRADED and self.baseline.state in GRADED)

    @property
    def name(self) -> str:
        return f"{self.source} ({self.label})" if self.label else self.source

    def as_json(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "trial": self.trial,
            "source": self.source,
            "label": self.label,
            "heldOut": self.held_out,
            "golden": self.golden,
            "input": self.input,
            "baseline": self.baseline.as_json(),
            "challenger": self.candidate.as_json(),
        }


@dataclass
class Verdict:
    verdict: str
    reason: str = ""
    #: Which rule answered: "judge", "bar", "a".."h", "module", "project".
    rule: str = ""
    inconclusive: bool = False
    per_metric: list[dict[str, Any]] = field(default_factory=list)
    per_input: list[dict[str, Any]] = field(default_factory=list)


# --- Reading numbers --------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A number as the record stores it: decimal text to twelve places at most (money's own), else a float."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            return str(value)
        return format(value.quantize(Decimal("1e-12")).normalize(), "f")
    if isinstance(value, float):
        return round(value, 9)
    return value


def _d(value: Any) -> Decimal:
    number = to_number(value)
    if number is None:
        return Decimal(0)
    return number if isinstance(number, Decimal) else Decimal(repr(float(number)))


def _how(spec: Mapping[str, Any]) -> str:
    return "mean" if spec.get("aggregate") == "mean" else "median"


def _read(spec: Mapping[str, Any]) -> bool:
    """Whether the check reads this metric: run-scoped (a period metric has no per-run value)."""
    return (spec.get("scope") or "run") == "run"


@dataclass
class Reading:
    """One metric read over the pairs: both sides' aggregates (for reading), the movement, its band."""

    metric: str
    role: str
    pairs: int
    incumbent: Any
    candidate: Any
    moved: Decimal | None
    tolerance: Decimal
    band: Decimal
    movements: list[Decimal]
    verdict: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "role": self.role,
            "pairs": self.pairs,
            "incumbent": _plain(self.incumbent),
            "candidate": _plain(self.candidate),
            "movement": _plain(self.moved),
            "gain": _plain(self.moved),
            "cleared": self.role == "objective" and self.moved is not None and self.moved > self.band,
            "tolerance": _plain(self.tolerance),
            "band": _plain(self.band),
            "spread": [_plain(-self.band), _plain(self.band)],
            "movements": [_plain(m) for m in self.movements],
            "verdict": self.verdict,
        }


def read_metric(metric_id: str, spec: Mapping[str, Any], terms: Mapping[str, Any], pairs: list[Pair]) -> Reading:
    """Read one metric over the pairs where both sides measured it."""
    both = [
        (p.baseline.vector[metric_id], p.candidate.vector[metric_id])
        for p in pairs
        if p.baseline.state in GRADED
        and p.candidate.state in GRADED
        and to_number((p.baseline.vector or {}).get(metric_id)) is not None
        and to_number((p.candidate.vector or {}).get(metric_id)) is not None
    ]
    how = _how(spec)
    movements = [m for m in (movement(spec, b, c) for b, c in both) if m is not None]
    incumbent = aggregate([b for b, _ in both], how)
    candidate = aggregate([c for _, c in both], how)
    tolerance = tolerance_band(dict(spec), terms, incumbent) if both else Decimal(0)
    moved = None
    band = tolerance
    if movements:
        moved = _d(aggregate(movements, how))
        if len(movements) >= MIN_SPREAD_PAIRS:
            band = max(tolerance, (max(movements) - min(movements)) / 2)
    return Reading(
        metric=metric_id,
        role=str(spec.get("role") or "observe"),
        pairs=len(both),
        incumbent=incumbent,
        candidate=candidate,
        moved=moved,
        tolerance=tolerance,
        band=band,
        movements=movements,
    )


def _below_floor(spec: Mapping[str, Any], value: Any) -> bool:
    floor = spec.get("floor")
    number = to_number(value)
    if floor is None or number is None:
        return False
    return _d(number) < _d(floor) if spec.get("direction", "max") == "max" else _d(number) > _d(floor)


def _fmt(value: Any) -> str:
    """A number as a reason says it: three significant digits."""
    number = to_number(value)
    if number is None:
        return str(value)
    return f"{float(number):.3g}"


# --- Before any comparator: the judge's health and the bar ------------------------------------------


def health(pairs: list[Pair], *, max_ungraded_share: Decimal) -> Verdict | None:
    """Inconclusive when the candidate's side is more than ``max_ungraded_share`` ungraded, or there is no bar.

    Challengers that never ran (or are unfinished) are in neither term of the share.
    """
    graded = sum(p.candidate.state in GRADED for p in pairs)
    ungraded = sum(p.candidate.state == UNGRADED for p in pairs)
    if graded + ungraded:
        share = Decimal(ungraded) / Decimal(graded + ungraded)
        if share > max_ungraded_share:
            return Verdict(
                "unvalidated",
                f"judge unhealthy: {ungraded} of {graded + ungraded} candidate replays could not be graded under the "
                f"pinned judge ({share:.2f} is above evaluation.judge.maxUngradedShare {max_ungraded_share})",
                rule="judge",
                inconclusive=True,
            )
    if pairs and not any(p.baseline.state in GRADED for p in pairs):
        return Verdict(
            "unvalidated",
            "no bar: the incumbent has no grade on any frozen input, so there is nothing to compare the candidate with",
            rule="bar",
            inconclusive=True,
        )
    return None


# --- The engine's rules -----------------------------------------------------------------------


def _per_input(pairs: list[Pair], lost: set[int]) -> list[dict[str, Any]]:
    by_slot: dict[int, list[Pair]] = defaultdict(list)
    for pair in pairs:
        by_slot[pair.slot].append(pair)
    rows = []
    for slot, group in sorted(by_slot.items()):
        first = group[0]
        rows.append(
            {
                "slot": slot,
                "source": first.source,
                "label": first.label,
                "heldOut": first.held_out,
                "golden": first.golden,
                "incumbent": [p.baseline.state for p in group],
                "candidate": [p.candidate.state for p in group],
                "lost": slot in lost,
            }
        )
    return rows


def _mostly(states: Iterable[str], wanted: tuple[str, ...]) -> bool:
    states = list(states)
    return bool(states) and sum(s in wanted for s in states) * 2 > len(states)


def lost_inputs(pairs: list[Pair]) -> set[int]:
    """Slots the incumbent held (viable on most trials) where the candidate failed or did not run on most trials."""
    by_slot: dict[int, list[Pair]] = defaultdict(list)
    for pair in pairs:
        by_slot[pair.slot].append(pair)
    lost = set()
    for slot, group in by_slot.items():
        held = _mostly((p.baseline.state for p in group if p.baseline.state in GRADED), (VIABLE,))
        candidate = [p.candidate.state for p in group if p.candidate.state in (*GRADED, NOT_RUN)]
        if held and _mostly(candidate, (FAILED, NOT_RUN)):
            lost.add(slot)
    return lost


def engine_verdict(terms: Mapping[str, Any], pairs: list[Pair], *, held_out: str = "") -> Verdict:
    """The engine's rules over ``pairs``, in order; the first that answers settles (see the module's docstring)."""
    lost = lost_inputs(pairs)
    rows = _per_input(pairs, lost)
    suffix = f"; {held_out}" if held_out else ""
    readings = {
        metric_id: read_metric(metric_id, spec, terms, pairs)
        for metric_id, spec in specs(terms).items()
        if _read(spec) and spec.get("role") in ("objective", "guard", "observe")
    }
    per_metric = [r.as_json() for r in readings.values()]

    def answer(verdict: str, reason: str, rule: str, *, inconclusive: bool = False) -> Verdict:
        return Verdict(
            verdict, reason + suffix, rule=rule, per_metric=per_metric, per_input=rows, inconclusive=inconclusive
        )

    judged = sum(p.judged for p in pairs)
    # (a) viability
    if not pairs or Decimal(judged) < VIABLE_SHARE * len(pairs):
        return answer(
            "unvalidated", f"too few pairs judged: {judged} of {len(pairs)} (at least two thirds are needed)", "a"
        )
    # (b) the bar (the check also asks it before any comparator)
    if not any(p.baseline.state in GRADED for p in pairs):
        return answer("unvalidated", "no bar: the incumbent has no grade on any frozen input", "b")
    # (c) lost inputs the incumbent held
    if lost:
        names = [row["source"] + (f" ({row['label']})" if row["label"] else "") for row in rows if row["lost"]]
        return answer("regressed", f"lost {len(names)} input(s) the incumbent held: {'; '.join(names)}", "c")
    metric_specs = specs(terms)
    # (d) the critical per-input veto
    for metric_id, spec in metric_specs.items():
        if not spec.get("critical") or not _read(spec) or spec.get("role") == "observe":
            continue
        for pair in pairs:
            if pair.baseline.state not in GRADED or pair.candidate.state not in GRADED:
                continue
            before = (pair.baseline.vector or {}).get(metric_id)
            after = (pair.candidate.vector or {}).get(metric_id)
            moved = movement(spec, before, after)
            if moved is not None and -moved > tolerance_band(dict(spec), terms, before):
                readings[metric_id].verdict = "regressed"
                return answer(
                    "regressed",
                    f"critical metric {metric_id} fell past its tolerance on {pair.name}: {_fmt(before)} → "
                    f"{_fmt(after)}",
                    "d",
                )
    # (e) the guard veto
    for metric_id, reading in readings.items():
        if reading.role == "guard" and reading.moved is not None and -reading.moved > reading.tolerance:
            reading.verdict = "regressed"
            return answer(
                "regressed",
                f"guard {metric_id} moved {_fmt(reading.moved)} (median over {reading.pairs} pairs), past its "
                f"tolerance ±{_fmt(reading.tolerance)}",
                "e",
            )
    # (f) floors on the candidate's median — only a floor the incumbent held over the same pairs (amended ruling):
    # an entity already under its floor is what a repair is for, and an A/A run must not regress.
    for metric_id, reading in readings.items():
        spec = metric_specs[metric_id]
        if (
            reading.role in ("objective", "guard")
            and _below_floor(spec, reading.candidate)
            and to_number(reading.incumbent) is not None
            and not _below_floor(spec, reading.incumbent)
        ):
            reading.verdict = "regressed"
            return answer(
                "regressed",
                f"{reading.role} {metric_id} stands at {_fmt(reading.candidate)} on the candidate, below its floor "
                f"{spec.get('floor')} the incumbent held at {_fmt(reading.incumbent)}",
                "f",
            )
    objectives = [r for r in readings.values() if r.role == "objective"]
    # (g) mustImprove
    for reading in objectives:
        if not metric_specs[reading.metric].get("mustImprove"):
            continue
        if reading.moved is None:
            return answer("unvalidated", f"no measurable gain: {reading.metric} was measured on no pair", "g")
        if reading.moved <= reading.band:
            return answer(
                "unvalidated",
                f"no measurable gain: {reading.metric} moved {_fmt(reading.moved)} against ±{_fmt(reading.band)}",
                "g",
            )
    # (g′) the objective against its noise band
    measured = [r for r in objectives if r.moved is not None]
    for reading in measured:
        reading.verdict = (
            "validated"
            if reading.moved > reading.band
            else "regressed"
            if reading.moved < -reading.band
            else "unvalidated"
        )
    falling = [r for r in measured if r.verdict == "regressed"]
    if falling:
        r = falling[0]
        return answer("regressed", f"objective {r.metric} fell {_fmt(r.moved)}, past the band ±{_fmt(r.band)}", "g′")
    # (g″) an objective the check cannot measure (R4.12): a reported one (people rate, nobody rates a replay), or,
    # with no objective measured, a run-scoped one the replays left out — inconclusive, never (h)'s validated.
    reported = [r for r in objectives if metric_specs[r.metric].get("kind") == "reported"]
    if reported:
        return answer(
            "unvalidated",
            f"objective {reported[0].metric} is rated by people only and nobody rates a replay: the check cannot "
            "measure it",
            "unmeasured",
            inconclusive=True,
        )
    if objectives and not measured:
        names = ", ".join(r.metric for r in objectives)
        return answer(
            "unvalidated",
            f"objective {names} was measured on no pair: the replays left it out",
            "unmeasured",
            inconclusive=True,
        )
    inside = [r for r in measured if r.verdict == "unvalidated"]
    if inside:
        r = inside[0]
        return answer("unvalidated", f"within noise: gain {_fmt(r.moved)} against ±{_fmt(r.band)} on {r.metric}", "g′")
    if measured:
        gains = ", ".join(f"{r.metric} {_fmt(r.moved)} beyond ±{_fmt(r.band)}" for r in measured)
        return answer("validated", f"gained {gains}", "g′")
    # (h) guards only
    return answer("validated", "no objective measured on both sides and no veto fired (a guards-only check)", "h")


# --- A brain's own verdict() ------------------------------------------------------------------


def brain_verdict(
    function: Callable[..., Any], spec: Mapping[str, Any], pairs: list[Pair], *, which: str, call: Any = None
) -> Verdict:
    """Ask a brain's ``verdict(spec, pairs)`` and check its shape; VerdictFault naming the function otherwise.

    The answer is ``{verdict, perMetric, perInput, reason}``: ``reason`` is
    required for regressed and unvalidated. ``call`` runs the function (the
    deadline wrapper for brain code); by default it is called directly.
    """
    arguments = (dict(spec), [p.as_json() for p in pairs])
    try:
        raw = call(function, *arguments) if call is not None else function(*arguments)
    except Exception as exc:  # noqa: BLE001 - the brain's own code: any failure makes the check inconclusive, named
        raise VerdictFault(f"{which} verdict() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("verdict") not in VERDICTS:
        raise VerdictFault(
            f"{which} verdict() must answer {{verdict: validated|regressed|unvalidated, …}}, not {raw!r}"
        )
    reason = raw.get("reason")
    if raw["verdict"] != "validated" and not (isinstance(reason, str) and reason.strip()):
        raise VerdictFault(f"{which} verdict() answered {raw['verdict']} without a reason (a reason is required)")
    per_metric = raw.get("perMetric") or []
    per_input = raw.get("perInput") or []
    if not isinstance(per_metric, list) or not isinstance(per_input, list):
        raise VerdictFault(f"{which} verdict(): perMetric and perInput must be lists")
    return Verdict(raw["verdict"], str(reason or ""), rule=which, per_metric=per_metric, per_input=per_input)
