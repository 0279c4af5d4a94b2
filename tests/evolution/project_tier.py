"""The project's own loop functions, named by the LOOP_* settings in tests/evolution/test_project_tier.py."""

from __future__ import annotations

from typing import Any

ASKED: list[str] = []


def window(ctx: Any) -> dict[str, Any]:
    ASKED.append(f"window:{ctx.targetId}:{ctx.phase}")
    return {"ready": False, "reason": "the project's window waits for Monday", "runIds": []}


def should_open(window: list[dict[str, Any]], trigger: dict[str, Any]) -> dict[str, Any]:
    ASKED.append(f"should_open:{len(window)}")
    return {"open": False, "reason": "the project never opens"}


def measure(run: Any) -> list[dict[str, Any]]:
    ASKED.append(f"measure:{run.targetId}")
    return [{"id": "replied", "value": 0.5}]


def verdict(spec: Any, pairs: Any) -> dict[str, Any]:
    return {"verdict": "validated", "perMetric": [], "perInput": [], "reason": None}
