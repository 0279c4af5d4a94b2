"""The engine tier: every evaluation/loop/chat key with its default (seed 003, DESIGN).

Resolution (singularity.brain.terms) lays MANIFEST.yaml and then the entity's
own block over these, by the seed's merge rules. Every reader takes its
numbers from resolved terms; none hard-codes a default elsewhere.
"""

from __future__ import annotations

from typing import Any

#: Built-in metrics measured on every graded execution; their meaning cannot be redefined.
CATALOG_METRICS: dict[str, dict[str, Any]] = {
    "quality": {"kind": "judged", "direction": "max", "unit": "score", "role": "objective", "scope": "run"},
    "cost_usd": {"kind": "computed", "direction": "min", "unit": "usd", "role": "observe", "scope": "run"},
    "duration_ms": {"kind": "computed", "direction": "min", "unit": "ms", "role": "observe", "scope": "run"},
    "tool_failures": {"kind": "computed", "direction": "min", "unit": "count", "role": "observe", "scope": "run"},
}

#: The rubric a human-rated metric gets when it declares no scale.
DEFAULT_HUMAN_SCALE: dict[str, Any] = {
    "min": 1,
    "max": 5,
    "step": 1,
    "labels": {"1": "Unusable", "2": "Poor", "3": "Acceptable", "4": "Good", "5": "Excellent"},
}

EVALUATION: dict[str, Any] = {
    "enabled": False,
    "method": "default",
    "modelRef": None,
    "sample": {"rate": 1.0, "maxPerDay": None},
    "gradeAfterHours": 0,
    "requirements": [],
    "scoreWeights": {"tasks": 0.6, "run": 0.4},
    "metricTolerance": {"judged": 0.05, "computedPct": 0.1},
    "metrics": {},
    "human": {
        "ask": "never",
        "spotCheck": 0.1,
        "expiresHours": 48,
        "agreement": {"minPairs": 5, "tolerance": 0.25, "threshold": 0.8, "maxPairs": 20},
    },
    "context": {"priorEpisodes": 0, "maxTokens": 20000},
    # Manifest only: an entity cannot raise its own ceiling for a failing judge.
    "judge": {"maxUngradedShare": 0.34},
}

LOOP: dict[str, Any] = {
    "enabled": False,
    "preset": "repair",
    "threshold": None,
    "trigger": {"windowRuns": 5, "minFailures": 2, "every": None},
    "check": {"mode": None, "inputs": 5, "trials": 1, "deadlineHours": 24, "incumbent": "frozen"},
    "watch": {
        "mode": "observe",
        "windowRuns": None,  # None: the trigger's
        "minFailures": None,  # None: the trigger's
        "deadlineHours": 336,
        "confidence": 0.9,
        "onInconclusive": "keep",
    },
    "autonomy": {
        "decide": "human",
        "merge": "human",
        "mergeMethod": "merge",
        "maxConsecutiveRegressions": 2,
        "onInconclusive": "human",
        "onUnmeasured": "pause",
        "requireCalibration": False,
    },
    # maxUsdPerMonth is ours (issue 16), brain-wide only: one entity's loop spend in a calendar month.
    "budget": {"maxUsdPerRun": None, "maxUsdPerMonth": None},
    "evidence": {"runs": 10, "maxTokens": 60000, "includeTrace": False},
    "lessons": {"maxRecalled": 10, "retentionDays": 180},
    "proposer": {"pipeline": None, "modelRef": None, "instructions": None},
    "cooldownHours": None,  # None: 6 h after a settle, 24 h after a regressed one
    "maxAnalysesPerDay": 3,
    "reviewDeadlineHours": 72,
    "windowStalledAfterHours": 336,
    "editablePaths": [],
    "protectedPaths": [],
    "maxChangedLines": 600,
    # The lock groups this entity joins (any tier, nearest list wins whole; [] leaves).
    "group": [],
    # Manifest only: the groups themselves, {id: {"lock": bool, "repair": "bypass" | "wait"}}.
    "groups": {},
}

#: The terms of one lock group that its declaration leaves out.
GROUP: dict[str, Any] = {"lock": True, "repair": "bypass"}

CHAT: dict[str, Any] = {
    "episode": {"idleHours": 24},
    "onRoleChange": "keep",
}

#: Under ``evaluation``: blocks merged field by field across tiers.
EVALUATION_FIELDWISE = ("sample", "metricTolerance")
#: Under ``evaluation``: blocks replaced whole by the nearest tier that writes them (omitted keys from the engine).
EVALUATION_WHOLESALE = ("human", "scoreWeights")
#: Under ``loop``: blocks replaced whole by the nearest tier that writes them (omitted keys from the engine).
LOOP_WHOLESALE = ("trigger", "check", "watch", "autonomy", "budget", "evidence", "lessons")
#: Under ``loop``: folded per field.
LOOP_FIELDWISE = ("proposer",)
