"""Resolve an entity's evaluation/loop/chat terms across the three tiers, refusing what the seed refuses.

The tiers are the engine (singularity.brain.defaults), the brain-wide
``constitution/MANIFEST.yaml`` and the entity's own frontmatter; the nearest
tier wins, and how a whole block merges depends on the block:

- ``evaluation.sample``, ``evaluation.metricTolerance``, ``evaluation.context``,
  ``chat.episode``: field by field (a key the entity leaves out comes from the
  manifest, then the engine).
- ``evaluation.human``, ``evaluation.scoreWeights`` and the loop blocks
  ``trigger``, ``check``, ``watch``, ``autonomy``, ``budget``, ``evidence``,
  ``lessons``: wholesale — the nearest tier that writes the block owns it, and
  the keys it leaves out come from the ENGINE, never from the tier above.
- ``loop.proposer``: per field; ``instructions`` keeps both tiers' lines,
  ``{"brain": [...], "entity": [...]}``, because the proposer is briefed on both.
- ``loop.protectedPaths``: the union of the tiers (an entity cannot unprotect
  what the brain protects); every other scalar or list: nearest tier wins,
  zero and ``null`` included.
- ``evaluation.metrics``: per metric id; the identity fields belong to the tier
  that introduces the metric (the engine's catalog for its four ids).
- ``enabled`` (both halves) is a kill switch: ``false`` in the manifest holds
  for every entity, and only the entity's own ``enabled: true`` turns it on.
- ``evaluation.judge`` and ``loop.groups`` live only in the manifest.

Every refusal is a line "<label>: <dotted key>: <why>"; ``TermsError`` carries
them all. ``resolve_terms`` returns the terms and, per leaf key, the tier it
came from.
"""

from __future__ import annotations

import copy
import difflib
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from singularity.brain import defaults as D
from singularity.errors import ConfigError

MANIFEST_LABEL = "constitution/MANIFEST.yaml"
ENGINE, MANIFEST, ENTITY = "engine", "manifest", "entity"
KINDS = ("workflow", "pipeline", "heartbeat", "role")
BLOCKS = ("evaluation", "loop", "chat")

GROUP_ID = re.compile(r"^[a-z0-9_-]+$")
METHOD_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
#: Keys that once sat flat in ``loop:`` and where each went.
LEGACY_LOOP_KEYS = {
    "modelRef": "loop.proposer.modelRef",
    "pipeline": "loop.proposer.pipeline",
    "instructions": "loop.proposer.instructions",
    "proposerModelRef": "loop.proposer.modelRef",
    "proposerPipeline": "loop.proposer.pipeline",
    "proposerInstructions": "loop.proposer.instructions",
}

METRIC_FIELDS = (
    "kind",
    "direction",
    "unit",
    "role",
    "scope",
    "target",
    "floor",
    "tolerance",
    "tolerancePct",
    "mustImprove",
    "critical",
    "aggregate",
    "optional",
    "scale",
    "human",
    "criterion",
)
#: Owned by the tier that introduces the metric; a lower tier may not change them.
IDENTITY_FIELDS = ("kind", "direction", "scope", "scale", "human")
METRIC_DEFAULTS: dict[str, Any] = {
    "unit": None,
    "role": None,
    "scope": "run",
    "target": None,
    "floor": None,
    "tolerance": None,
    "tolerancePct": None,
    "mustImprove": False,
    "critical": False,
    "aggregate": "median",
    "optional": False,
    "scale": None,
    "human": False,
    "criterion": None,
}


class TermsError(ConfigError):
    """The terms do not load; ``errors`` holds one "<label>: <dotted key>: <why>" line per refusal."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


# ---------------------------------------------------------------------------
# Value checks: each returns why a value is refused, or None.


@dataclass(frozen=True)
class Num:
    low: float | None = 0
    high: float | None = None
    integer: bool = False
    nullable: bool = False
    above_low: bool = False

    def why(self, value: Any) -> str | None:
        if value is None:
            return None if self.nullable else "must be a number, not null"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be {'a whole number' if self.integer else 'a number'}, not {value!r}"
        if self.integer and not float(value).is_integer():
            return f"must be a whole number, not {value!r}"
        if self.low is not None and (value < self.low or (self.above_low and value == self.low)):
            if self.low == 0 and not self.above_low:
                return f"must not be negative, not {value!r}"
            return f"must be {'above' if self.above_low else 'at least'} {self.low:g}, not {value!r}"
        if self.high is not None and value > self.high:
            return f"must be between {self.low:g} and {self.high:g}, not {value!r}"
        return None


@dataclass(frozen=True)
class Choice:
    values: tuple[Any, ...]
    nullable: bool = False

    def why(self, value: Any) -> str | None:
        if value is None and self.nullable:
            return None
        if isinstance(value, str) and value in self.values:
            return None
        allowed = " | ".join(str(v) for v in self.values)
        return f"must be one of {allowed}, not {value!r}"


@dataclass(frozen=True)
class Flag:
    def why(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else f"must be true or false, not {value!r}"


@dataclass(frozen=True)
class Text:
    nullable: bool = False
    pattern: re.Pattern[str] | None = None

    def why(self, value: Any) -> str | None:
        if value is None:
            return None if self.nullable else "must be text, not null"
        if not isinstance(value, str) or not value.strip():
            return f"must be non-empty text, not {value!r}"
        if self.pattern is not None and not self.pattern.match(value):
            return f"is not a valid name: {value!r}"
        return None


@dataclass(frozen=True)
class TextList:
    nullable: bool = False

    def why(self, value: Any) -> str | None:
        if value is None:
            return None if self.nullable else "must be a list of text, not null"
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            return f"must be a list of non-empty text lines, not {value!r}"
        return None


@dataclass(frozen=True)
class Money:
    def why(self, value: Any) -> str | None:
        if value is None:
            return None
        try:
            amount = _decimal(value)
        except (InvalidOperation, ValueError, TypeError):
            return f"must be an amount in USD, not {value!r}"
        return None if amount >= 0 else f"must not be negative, not {value!r}"


def _decimal(value: Any) -> Decimal:
    if isinstance(value, bool):
        raise TypeError("a boolean is not an amount")
    if isinstance(value, float):
        return Decimal(repr(value))
    amount = Decimal(str(value))
    if not amount.is_finite():
        raise ValueError("not finite")
    return amount


Spec = Any  # a check above, or a dict of them (a block)

EVALUATION_SCHEMA: dict[str, Spec] = {
    "enabled": Flag(),
    "method": Text(pattern=METHOD_NAME),
    "modelRef": Text(nullable=True),
    "sample": {"rate": Num(0, 1), "maxPerDay": Num(0, integer=True, nullable=True)},
    "gradeAfterHours": Num(0),
    "requirements": TextList(),
    "scoreWeights": {"tasks": Num(0), "run": Num(0)},
    "metricTolerance": {"judged": Num(0), "computedPct": Num(0)},
    "metrics": None,  # checked by _check_metric_decl
    "human": {
        "ask": Choice(("never", "always", "until-calibrated")),
        "spotCheck": Num(0, 1),
        "expiresHours": Num(0),
        "agreement": {
            "minPairs": Num(0, integer=True),
            "tolerance": Num(0, 1),
            "threshold": Num(0, 1),
            "maxPairs": Num(1, integer=True),
        },
    },
    "context": {"priorEpisodes": Num(0, integer=True), "maxTokens": Num(0, integer=True)},
    "judge": {"maxUngradedShare": Num(0, 1)},
}

LOOP_SCHEMA: dict[str, Spec] = {
    "enabled": Flag(),
    "preset": Choice(("repair", "evolve")),
    "threshold": Num(0, 1, nullable=True),
    "trigger": {
        "windowRuns": Num(1, integer=True),
        "minFailures": Num(1, integer=True),
        "every": Num(0, nullable=True, above_low=True),
    },
    "check": {
        "mode": Choice(("replay", "none"), nullable=True),
        "inputs": Num(1, integer=True),
        "trials": Num(1, 3, integer=True),
        "deadlineHours": Num(0, above_low=True),
        "incumbent": Choice(("frozen", "replay")),
    },
    "watch": {
        "mode": Choice(("observe", "none")),
        "windowRuns": Num(1, integer=True, nullable=True),
        "minFailures": Num(1, integer=True, nullable=True),
        "deadlineHours": Num(0, above_low=True),
        "confidence": Num(0, 1, above_low=True),
        "onInconclusive": Choice(("keep", "revert")),
    },
    "autonomy": {
        "decide": Choice(("human", "auto")),
        "merge": Choice(("human", "auto")),
        "mergeMethod": Choice(("squash", "rebase", "merge")),
        "maxConsecutiveRegressions": Num(1, integer=True, nullable=True),
        "onInconclusive": Choice(("human", "ship", "close")),
        "onUnmeasured": Choice(("pause", "continue")),
        "requireCalibration": Flag(),
    },
    "budget": {"maxUsdPerRun": Money(), "maxUsdPerMonth": Money()},
    "evidence": {"runs": Num(0, integer=True), "maxTokens": Num(0, integer=True), "includeTrace": Flag()},
    "lessons": {"maxRecalled": Num(0, integer=True), "retentionDays": Num(0)},
    "proposer": {"pipeline": Text(nullable=True), "modelRef": Text(nullable=True), "instructions": TextList(True)},
    "cooldownHours": Num(0, nullable=True),
    "maxAnalysesPerDay": Num(0, integer=True, nullable=True),
    "reviewDeadlineHours": Num(0, above_low=True),
    "windowStalledAfterHours": Num(0),
    "editablePaths": TextList(),
    "protectedPaths": TextList(),
    "maxChangedLines": Num(0, integer=True),
    "group": TextList(),
    "groups": None,  # checked by _check_groups
}

CHAT_SCHEMA: dict[str, Spec] = {
    "episode": {"idleHours": Num(0, above_low=True)},
    "onRoleChange": Choice(("keep", "reset")),
}

SCHEMAS = {"evaluation": EVALUATION_SCHEMA, "loop": LOOP_SCHEMA, "chat": CHAT_SCHEMA}
MANIFEST_ONLY = {"evaluation.judge": "evaluation.judge", "loop.groups": "loop.groups"}
#: Brain-wide keys inside a loop block (issue 16): written in the manifest, kept whatever tier owns the block.
MANIFEST_ONLY_LEAVES = (("loop", "budget", "maxUsdPerMonth"),)

METRIC_SCHEMA: dict[str, Spec] = {
    "kind": Choice(("judged", "computed", "reported")),
    "direction": Choice(("max", "min")),
    "unit": Text(nullable=True),
    "role": Choice(("objective", "guard", "observe")),
    "scope": Choice(("run", "period")),
    "target": Num(None, nullable=True),
    "floor": Num(None, nullable=True),
    "tolerance": Num(0, nullable=True),
    "tolerancePct": Num(0, nullable=True),
    "mustImprove": Flag(),
    "critical": Flag(),
    "aggregate": Choice(("median", "mean")),
    "optional": Flag(),
    "human": Flag(),
    "criterion": Text(nullable=True),
}


# ---------------------------------------------------------------------------
# Checking one tier on its own.


class _Errors:
    def __init__(self, label: str) -> None:
        self.label = label
        self.lines: list[str] = []

    def add(self, key: str, why: str) -> None:
        self.lines.append(f"{self.label}: {key}: {why}")


def _unknown(errors: _Errors, key: str, name: str, known: list[str]) -> None:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    errors.add(key, f"unknown key{hint}; a misspelt key would otherwise be silently ignored")


def _check_block(errors: _Errors, block: Any, schema: dict[str, Spec], prefix: str) -> None:
    if not isinstance(block, dict):
        errors.add(prefix, f"must be a mapping of keys, not {block!r}")
        return
    for name, value in block.items():
        key = f"{prefix}.{name}"
        if name not in schema:
            if prefix == "loop" and name in LEGACY_LOOP_KEYS:
                errors.add(key, f"no longer sits flat in loop: — it moved to {LEGACY_LOOP_KEYS[name]}")
            else:
                _unknown(errors, key, name, list(schema))
            continue
        spec = schema[name]
        if key == "evaluation.metrics":
            _check_metrics_decl(errors, value)
        elif key == "loop.groups":
            _check_groups(errors, value)
        elif isinstance(spec, dict):
            _check_block(errors, value, spec, key)
        else:
            why = spec.why(value)
            if why:
                errors.add(key, why)
    if prefix == "evaluation.scoreWeights" and isinstance(block, dict):
        present = [k for k in ("tasks", "run") if k in block]
        if len(present) == 1:
            missing = "run" if present == ["tasks"] else "tasks"
            errors.add(
                prefix, f"declares {present[0]} without {missing}: declare the pair — half a split is not a split"
            )
        elif (
            len(present) == 2
            and all(isinstance(block[k], (int, float)) for k in present)
            and block["tasks"] + block["run"] <= 0
        ):
            errors.add(prefix, "the two weights sum to zero: they are relative weights normalized by their total")


def _check_metrics_decl(errors: _Errors, metrics: Any) -> None:
    if not isinstance(metrics, dict):
        errors.add("evaluation.metrics", f"must be a mapping of metric ids, not {metrics!r}")
        return
    for metric_id, decl in metrics.items():
        prefix = f"evaluation.metrics.{metric_id}"
        if not re.match(r"^[A-Za-z0-9_.-]+$", metric_id):
            errors.add(prefix, "a metric id is letters, digits, _, . and -")
        if decl is None:
            decl = {}
        if not isinstance(decl, dict):
            errors.add(prefix, f"must be a mapping of metric fields, not {decl!r}")
            continue
        for name, value in decl.items():
            key = f"{prefix}.{name}"
            if name == "scale":
                why = _scale_why(value)
                if why:
                    errors.add(key, why)
            elif name in METRIC_SCHEMA:
                why = METRIC_SCHEMA[name].why(value)
                if why:
                    errors.add(key, why)
            else:
                _unknown(errors, key, name, list(METRIC_FIELDS))


def _scale_why(scale: Any) -> str | None:
    """Why a ``{min, max, step?, labels?}`` scale is refused, or None."""
    if not isinstance(scale, dict):
        return f"must be a mapping {{min, max, step?, labels?}}, not {scale!r}"
    unknown = set(scale) - {"min", "max", "step", "labels"}
    if unknown:
        return f"unknown key {sorted(unknown)[0]!r}; a scale is {{min, max, step?, labels?}}"
    for name in ("min", "max"):
        if name not in scale:
            return f"needs {name}"
        if isinstance(scale[name], bool) or not isinstance(scale[name], (int, float)):
            return f"{name} must be a number, not {scale[name]!r}"
    if scale["min"] >= scale["max"]:
        return f"min {scale['min']!r} must be below max {scale['max']!r}"
    step = scale.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0):
        return f"step must be a positive number, not {step!r}"
    labels = scale.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            return f"labels must map a step or a band to its meaning, not {labels!r}"
        for point, meaning in labels.items():
            if _label_point(point) is None:
                return f"label key {point!r} is neither a step ('3') nor an inclusive band ('2..4')"
            if not isinstance(meaning, str):
                return f"label {point!r} must be text, not {meaning!r}"
    return None


def _label_point(point: str) -> tuple[float, float] | None:
    """A label key as the inclusive range it covers ("3" → (3, 3), "2..4" → (2, 4)), or None when malformed."""
    parts = str(point).split("..")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        return None
    if len(numbers) == 1:
        return numbers[0], numbers[0]
    if len(numbers) == 2 and numbers[0] <= numbers[1]:
        return numbers[0], numbers[1]
    return None


def _check_groups(errors: _Errors, groups: Any) -> None:
    if not isinstance(groups, dict):
        errors.add("loop.groups", f"must be a mapping of group ids, not {groups!r}")
        return
    for group_id, decl in groups.items():
        key = f"loop.groups.{group_id}"
        if not GROUP_ID.match(group_id):
            errors.add(key, "a group id is lowercase letters, digits, _ and -")
        if decl is None:
            continue
        _check_block(errors, decl, {"lock": Flag(), "repair": Choice(("bypass", "wait"))}, key)


# ---------------------------------------------------------------------------
# Merging.


class _Resolver:
    """Lays the manifest tier and then the entity tier over the engine, recording each leaf's tier."""

    def __init__(self, manifest: dict[str, dict[str, Any]], entity: dict[str, dict[str, Any]]) -> None:
        self.tiers = {MANIFEST: manifest, ENTITY: entity}
        self.provenance: dict[str, str] = {}

    def written(self, tier: str, block: str, *path: str) -> tuple[bool, Any]:
        node: Any = self.tiers[tier].get(block, {})
        for name in path:
            if not isinstance(node, dict) or name not in node:
                return False, None
            node = node[name]
        return True, node

    def nearest(self, block: str, *path: str, engine: Any) -> Any:
        for tier in (ENTITY, MANIFEST):
            found, value = self.written(tier, block, *path)
            if found:
                self.leaf(block, path, value, tier)
                return copy.deepcopy(value)
        self.leaf(block, path, engine, ENGINE)
        return copy.deepcopy(engine)

    def leaf(self, block: str, path: tuple[str, ...], value: Any, tier: str) -> None:
        """Record provenance for ``value`` at ``block.path`` (recursing into plain sub-blocks)."""
        key = ".".join((block, *path))
        if isinstance(value, dict) and value and key not in _DICT_LEAVES and not key.startswith("evaluation.metrics"):
            for name, sub in value.items():
                self.leaf(block, (*path, name), sub, tier)
        else:
            self.provenance[key] = tier

    def fieldwise(self, block: str, name: str, engine: dict[str, Any]) -> dict[str, Any]:
        return {key: self.nearest(block, name, key, engine=default) for key, default in engine.items()}

    def wholesale(self, block: str, name: str, engine: dict[str, Any]) -> dict[str, Any]:
        for tier in (ENTITY, MANIFEST):
            found, value = self.written(tier, block, name)
            if found:
                return self._fill(block, (name,), engine, value or {}, tier)
        self.leaf(block, (name,), engine, ENGINE)
        return copy.deepcopy(engine)

    def _fill(self, block: str, path: tuple[str, ...], engine: dict[str, Any], written: dict[str, Any], tier: str):
        out: dict[str, Any] = {}
        for key, default in engine.items():
            if key in written:
                if isinstance(default, dict) and isinstance(written[key], dict):
                    out[key] = self._fill(block, (*path, key), default, written[key], tier)
                else:
                    out[key] = copy.deepcopy(written[key])
                    self.leaf(block, (*path, key), written[key], tier)
            else:
                out[key] = copy.deepcopy(default)
                self.leaf(block, (*path, key), default, ENGINE)
        return out

    def switch(self, block: str) -> bool:
        """The kill switch: on only when the entity says true and the manifest does not say false."""
        key = f"{block}.enabled"
        in_manifest, manifest_value = self.written(MANIFEST, block, "enabled")
        in_entity, entity_value = self.written(ENTITY, block, "enabled")
        if in_manifest and manifest_value is False:
            self.provenance[key] = MANIFEST
            return False
        if in_entity:
            self.provenance[key] = ENTITY
            return bool(entity_value)
        self.provenance[key] = ENGINE
        return False


#: Dict-valued keys recorded as one leaf.
_DICT_LEAVES = {"loop.groups"}


def _resolve_evaluation(r: _Resolver, errors: _Errors) -> dict[str, Any]:
    engine = D.EVALUATION
    out: dict[str, Any] = {"enabled": r.switch("evaluation")}
    for name in ("method", "modelRef", "gradeAfterHours", "requirements"):
        out[name] = r.nearest("evaluation", name, engine=engine[name])
    out["sample"] = r.fieldwise("evaluation", "sample", engine["sample"])
    out["scoreWeights"] = r.wholesale("evaluation", "scoreWeights", engine["scoreWeights"])
    out["metricTolerance"] = r.fieldwise("evaluation", "metricTolerance", engine["metricTolerance"])
    out["metrics"] = _resolve_metrics(r, errors, method=out["method"])
    out["human"] = r.wholesale("evaluation", "human", engine["human"])
    out["context"] = r.fieldwise("evaluation", "context", engine["context"])
    # Manifest only: the entity tier was refused before we got here.
    out["judge"] = r.fieldwise("evaluation", "judge", engine["judge"])
    return {key: out[key] for key in engine}


def _resolve_loop(r: _Resolver) -> dict[str, Any]:
    engine = D.LOOP
    out: dict[str, Any] = {"enabled": r.switch("loop")}
    for name in D.LOOP_WHOLESALE:
        out[name] = r.wholesale("loop", name, engine[name])
    proposer = engine["proposer"]
    out["proposer"] = {
        "pipeline": r.nearest("loop", "proposer", "pipeline", engine=proposer["pipeline"]),
        "modelRef": r.nearest("loop", "proposer", "modelRef", engine=proposer["modelRef"]),
        "instructions": _instructions(r),
    }
    # The monthly ceiling is brain-wide: an entity's own budget block (refused from holding it) never drops it.
    out["budget"]["maxUsdPerMonth"] = r.nearest("loop", "budget", "maxUsdPerMonth", engine=None)
    out["protectedPaths"] = _union_paths(r)
    out["groups"] = _groups(r)
    for name in engine:
        if name not in out:
            out[name] = r.nearest("loop", name, engine=engine[name])
    return {key: out[key] for key in engine}


def _instructions(r: _Resolver) -> dict[str, list[str]]:
    """Both tiers' proposer instructions: the brief carries the brain's lines and then the entity's."""
    result: dict[str, list[str]] = {}
    for tier, name in ((MANIFEST, "brain"), (ENTITY, "entity")):
        found, lines = r.written(tier, "loop", "proposer", "instructions")
        result[name] = list(lines or []) if found else []
        r.provenance[f"loop.proposer.instructions.{name}"] = tier if found else ENGINE
    return result


def _union_paths(r: _Resolver) -> list[str]:
    paths: list[str] = list(D.LOOP["protectedPaths"])
    tier_seen = ENGINE
    for tier in (MANIFEST, ENTITY):
        found, lines = r.written(tier, "loop", "protectedPaths")
        if found:
            tier_seen = tier
            paths.extend(p for p in lines or [] if p not in paths)
    r.provenance["loop.protectedPaths"] = tier_seen
    return paths


def _groups(r: _Resolver) -> dict[str, dict[str, Any]]:
    found, groups = r.written(MANIFEST, "loop", "groups")
    r.provenance["loop.groups"] = MANIFEST if found else ENGINE
    return {gid: {**D.GROUP, **(decl or {})} for gid, decl in (groups or {}).items()}


def _resolve_chat(r: _Resolver) -> dict[str, Any]:
    engine = D.CHAT
    return {
        "episode": r.fieldwise("chat", "episode", engine["episode"]),
        "onRoleChange": r.nearest("chat", "onRoleChange", engine=engine["onRoleChange"]),
    }


# ---------------------------------------------------------------------------
# Metrics.


def _resolve_metrics(r: _Resolver, errors: _Errors, *, method: str) -> dict[str, dict[str, Any]]:
    declared: dict[str, dict[str, dict[str, Any]]] = {}
    for tier in (MANIFEST, ENTITY):
        found, metrics = r.written(tier, "evaluation", "metrics")
        for metric_id, decl in (metrics or {}).items() if found else ():
            declared.setdefault(metric_id, {})[tier] = decl or {}
    order = list(D.CATALOG_METRICS) + [m for m in declared if m not in D.CATALOG_METRICS]
    resolved: dict[str, dict[str, Any]] = {}
    origin: dict[str, dict[str, str]] = {}
    for metric_id in order:
        spec, where = _merge_metric(errors, metric_id, declared.get(metric_id, {}))
        resolved[metric_id], origin[metric_id] = spec, where
    _derive_roles(resolved, origin, method=method)
    for metric_id, spec in resolved.items():
        for name in spec:
            r.provenance[f"evaluation.metrics.{metric_id}.{name}"] = origin[metric_id].get(name, ENGINE)
    return resolved


def _merge_metric(
    errors: _Errors, metric_id: str, tiers: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, str]]:
    """One metric's spec across the tiers and, per field, the tier it came from."""
    catalog = D.CATALOG_METRICS.get(metric_id)
    spec: dict[str, Any] = dict(METRIC_DEFAULTS)
    where: dict[str, str] = {}
    introducer = ENGINE
    if catalog is not None:
        spec.update(catalog)
    else:
        introducer = next(iter(tiers), ENGINE)
    for tier in (MANIFEST, ENTITY):
        decl = tiers.get(tier)
        if decl is None:
            continue
        for name, value in decl.items():
            if name not in METRIC_FIELDS:
                continue
            key = f"evaluation.metrics.{metric_id}.{name}"
            owned = name in IDENTITY_FIELDS or (catalog is not None and name == "unit")
            if owned and (catalog is not None or tier != introducer):
                if catalog is not None and name in ("scale", "human"):
                    spec[name] = value  # refused with its own reason by _check_metric
                    where[name] = tier
                    continue
                if value != spec.get(name):
                    if catalog is not None:
                        errors.add(key, f"{metric_id} is an engine catalog metric: its meaning cannot be redefined")
                    else:
                        owner = "the manifest" if introducer == MANIFEST else "the tier"
                        errors.add(
                            key,
                            f"identity field owned by {owner} that introduces {metric_id}; "
                            "a lower tier cannot redefine it",
                        )
                continue
            spec[name] = copy.deepcopy(value)
            where[name] = tier
        if tier == introducer:
            _introduce(spec, decl)
    spec["catalog"] = catalog is not None
    return {key: spec.get(key) for key in (*METRIC_FIELDS, "catalog")}, where


def _introduce(spec: dict[str, Any], decl: dict[str, Any]) -> None:
    """Identity the introducing tier implies: a reported metric is people's; a human-rated one gets the 1–5 rubric."""
    if spec.get("kind") == "reported" and "human" not in decl:
        spec["human"] = True
    if spec.get("scale") is None and spec.get("human") is True and spec.get("kind") != "computed":
        spec["scale"] = copy.deepcopy(D.DEFAULT_HUMAN_SCALE)


def _derive_roles(resolved: dict[str, dict[str, Any]], origin: dict[str, dict[str, str]], *, method: str) -> None:
    """quality becomes a guard under another objective unless its role was written; under method none it is absent."""
    quality = resolved["quality"]
    written = "role" in origin["quality"]
    if method == "none":
        if not written:
            quality["role"] = "observe"
        return
    other_objective = any(spec["role"] == "objective" for mid, spec in resolved.items() if mid != "quality")
    if other_objective and not written:
        quality["role"] = "guard"


def _check_metric(errors: _Errors, metric_id: str, spec: dict[str, Any], *, require_role: bool) -> None:
    key = f"evaluation.metrics.{metric_id}"
    if not spec["catalog"]:
        for name in ("kind", "direction") + (("role",) if require_role else ()):
            if spec.get(name) is None:
                errors.add(
                    f"{key}.{name}",
                    f"required on a metric the engine does not know: say what {metric_id} is "
                    "(kind, direction) and what it is for (role)",
                )
    kind, scope = spec.get("kind"), spec.get("scope")
    if metric_id == "quality":
        for name in ("human", "scale"):
            if spec.get(name) not in (None, False):
                errors.add(
                    f"{key}.{name}", "quality stays the judge's alone: neither scale nor human can be declared on it"
                )
    elif kind == "computed":
        if spec.get("human"):
            errors.add(f"{key}.human", "a computed metric is measured by code in its own units: it takes no human")
        if spec.get("scale") is not None:
            errors.add(f"{key}.scale", "a computed metric is measured by code in its own units: it takes no scale")
    if scope == "period":
        if kind not in (None, "computed"):
            errors.add(f"{key}.scope", f"scope: period implies kind: computed, and {metric_id} is {kind}")
        if spec.get("critical"):
            errors.add(f"{key}.critical", "a period metric never reaches a frozen input to veto: it cannot be critical")
    if kind == "reported":
        if not spec.get("criterion"):
            errors.add(f"{key}.criterion", "a reported metric needs a criterion: people rate against it")
        if spec.get("optional"):
            errors.add(f"{key}.optional", "a reported metric is optional by nature: it cannot be declared optional")
        if spec.get("critical"):
            errors.add(f"{key}.critical", "nobody rates a replay, so a reported metric cannot be critical")
        if spec.get("human") is False:
            errors.add(f"{key}.human", "a reported metric is rated by people: human cannot be false")


# ---------------------------------------------------------------------------
# Cross-field rules on the resolved terms.


def _check_resolved(errors: _Errors, terms: dict[str, Any], r: _Resolver, *, tier: str, require_role: bool) -> None:
    """Refusals that depend on more than one key; ``tier`` is whose writing is checked (manifest or entity)."""
    evaluation, loop = terms["evaluation"], terms["loop"]
    for metric_id, spec in evaluation["metrics"].items():
        _check_metric(errors, metric_id, spec, require_role=require_role)
    if evaluation["method"] == "none":
        for metric_id, spec in evaluation["metrics"].items():
            if spec["kind"] == "judged" and not spec["catalog"]:
                errors.add(
                    f"evaluation.metrics.{metric_id}.kind",
                    "judged metric under method: none — there is no judge to score it",
                )
        if evaluation["metrics"]["quality"]["role"] in ("objective", "guard"):
            errors.add(
                "evaluation.metrics.quality.role",
                "quality declared as an objective or guard under method: none — there is no score to read",
            )
        if evaluation["requirements"]:
            errors.add("evaluation.requirements", "requirements under method: none — free text only a judge can check")
    trigger = loop["trigger"]
    if trigger["minFailures"] > trigger["windowRuns"] and _owner(r, "loop.trigger") == tier:
        errors.add(
            "loop.trigger.minFailures",
            f"{trigger['minFailures']} is above windowRuns {trigger['windowRuns']}: the trigger could never fire",
        )
    watch = loop["watch"]
    watch_runs = watch["windowRuns"] if watch["windowRuns"] is not None else trigger["windowRuns"]
    watch_failures = watch["minFailures"] if watch["minFailures"] is not None else trigger["minFailures"]
    if watch_failures > watch_runs and tier in (_owner(r, "loop.watch"), _owner(r, "loop.trigger")):
        errors.add(
            "loop.watch.minFailures",
            f"{watch_failures} is above the watch's windowRuns {watch_runs}: the watch could never regress a change",
        )
    if loop["preset"] == "evolve":
        evolve_from = r.provenance.get("loop.preset")
        # An entity under evolve may not write them; the manifest may not write them beside its own evolve.
        if tier == ENTITY or evolve_from == MANIFEST:
            for path, label in (
                (("threshold",), "loop.threshold"),
                (("trigger", "minFailures"), "loop.trigger.minFailures"),
            ):
                found, _ = r.written(tier, "loop", *path)
                if found:
                    errors.add(
                        label,
                        "refused under preset: evolve — it describes a bad run, and nothing an evolve cycle opens on is one "
                        "(under evolve trigger.windowRuns is the cadence)",
                    )


def _owner(r: _Resolver, prefix: str) -> str:
    """The tier that owns a wholesale block (the tier of any of its leaves that is not the engine's)."""
    tiers = {t for k, t in r.provenance.items() if k.startswith(prefix + ".")} - {ENGINE}
    return tiers.pop() if tiers else ENGINE


def _manifest_only(errors: _Errors, entity: dict[str, dict[str, Any]]) -> None:
    for dotted in MANIFEST_ONLY:
        block, name = dotted.split(".")
        if name in entity.get(block, {}):
            errors.add(dotted, "brain-wide only: set it in constitution/MANIFEST.yaml, never on an entity")
            entity[block] = {k: v for k, v in entity[block].items() if k != name}
    for block, name, leaf in MANIFEST_ONLY_LEAVES:
        inner = entity.get(block, {}).get(name)
        if isinstance(inner, dict) and leaf in inner:
            errors.add(
                f"{block}.{name}.{leaf}", "brain-wide only: set it in constitution/MANIFEST.yaml, never on an entity"
            )
            entity[block] = {**entity[block], name: {k: v for k, v in inner.items() if k != leaf}}


def _tier_blocks(errors: _Errors, tier: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    tier = tier or {}
    if not isinstance(tier, dict):
        errors.add("(top level)", "must be a mapping of keys")
        return {name: {} for name in BLOCKS}
    blocks: dict[str, dict[str, Any]] = {}
    for name in BLOCKS:
        block = tier.get(name)
        if block is None:
            blocks[name] = {}
        elif not isinstance(block, dict):
            errors.add(name, f"must be a mapping of keys, not {block!r}")
            blocks[name] = {}
        else:
            _check_block(errors, block, SCHEMAS[name], name)
            blocks[name] = block
    return blocks


def _resolve(r: _Resolver, errors: _Errors) -> dict[str, Any]:
    return {"evaluation": _resolve_evaluation(r, errors), "loop": _resolve_loop(r), "chat": _resolve_chat(r)}


# ---------------------------------------------------------------------------
# Public entry points.


def check_manifest(manifest: dict[str, Any] | None) -> list[str]:
    """Every refusal of MANIFEST.yaml on its own, as "constitution/MANIFEST.yaml: <key>: <why>" lines ([] when it loads)."""
    errors = _Errors(MANIFEST_LABEL)
    blocks = _tier_blocks(errors, manifest)
    if errors.lines:
        return errors.lines
    r = _Resolver(blocks, {})
    terms = _resolve(r, errors)
    _check_resolved(errors, terms, r, tier=MANIFEST, require_role=False)
    return errors.lines


def resolve_terms(
    kind: str, manifest: dict[str, Any] | None, entity: dict[str, Any] | None, *, entity_label: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """Return (terms, provenance) for an entity of ``kind``; TermsError listing every refusal otherwise.

    ``manifest`` and ``entity`` are the whole MANIFEST.yaml and the entity's whole
    frontmatter as plain data; only their ``evaluation``/``loop``/``chat`` blocks are read.
    """
    if kind not in KINDS:
        raise TermsError([f"{entity_label}: kind: must be one of {' | '.join(KINDS)}, not {kind!r}"])
    manifest_errors = check_manifest(manifest)
    if manifest_errors:
        raise TermsError(manifest_errors)
    manifest_blocks = _tier_blocks(_Errors(MANIFEST_LABEL), manifest)
    errors = _Errors(entity_label)
    entity_blocks = _tier_blocks(errors, entity)
    _manifest_only(errors, entity_blocks)
    if errors.lines:
        raise TermsError(errors.lines)
    r = _Resolver(manifest_blocks, entity_blocks)
    terms = _resolve(r, errors)
    _check_resolved(errors, terms, r, tier=ENTITY, require_role=True)
    if errors.lines:
        raise TermsError(errors.lines)
    budget = terms["loop"]["budget"]
    for name in ("maxUsdPerRun", "maxUsdPerMonth"):
        if budget[name] is not None:
            budget[name] = str(_decimal(budget[name]))
    return terms, dict(sorted(r.provenance.items()))


def metric_band(metric: dict[str, Any], evaluation: dict[str, Any]) -> tuple[float | None, float | None]:
    """Return (absolute, relative) tolerance of a resolved metric: its own pair when it names either, else the default axis.

    A metric naming ``tolerance`` or ``tolerancePct`` owns both axes (the unnamed
    one is None, not the default); otherwise judged/reported metrics take
    ``metricTolerance.judged`` as an absolute band and computed ones
    ``metricTolerance.computedPct`` as a relative band.
    """
    if metric.get("tolerance") is not None or metric.get("tolerancePct") is not None:
        return metric.get("tolerance"), metric.get("tolerancePct")
    tolerance = evaluation["metricTolerance"]
    if metric.get("kind") == "computed":
        return None, tolerance["computedPct"]
    return tolerance["judged"], None
