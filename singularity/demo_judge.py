"""The demo model's judge: an offline grade that reads the run it is shown (issue 15).

Asked for a ``run_evaluation`` answer (``grading.judge``), the demo model
does what a careful judge would with the little it can read: a run that
ended ``succeeded`` with no failed tool call is good, anything else is not.
Every judged metric gets the top of its scale for a good run and the bottom
for a bad one, so a person's rating beside it is a calibration pair that
agrees or not. Criteria, feedback and the failure category are sentences a
person reads on the run page, never placeholders.
"""

from __future__ import annotations

import re
from typing import Any

#: The schema name ``grading.judge.response_format`` asks under.
JUDGE_SCHEMA_NAME = "run_evaluation"

_STATUS = re.compile(r"^Run \S+, [^,\n]*, status (?P<status>\w+)(?:, error: (?P<error>.*))?$", re.MULTILINE)
_TOOL = re.compile(r"^- (?P<tool>[^:\n]+): (?P<status>\w+)(?: \((?P<error>.*)\))?$")
_SCALE = re.compile(r"^- (?P<id>[\w.-]+): .*? — a number from (?P<low>-?[\d.]+) to (?P<high>-?[\d.]+)")
_BAD_TOOL = {"failed", "indeterminate", "error"}


def is_judge_request(response_format: dict[str, Any]) -> bool:
    """Whether a request's response format is the judge's answer schema."""
    return (response_format.get("json_schema") or {}).get("name") == JUDGE_SCHEMA_NAME


def _section(text: str, heading: str) -> list[str]:
    """The list lines under ``heading`` (``## …`` or ``### …``) up to the next heading."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("#"):
            inside = line.lstrip("#").strip().startswith(heading)
            continue
        if inside and line.startswith("- "):
            lines.append(line)
    return lines


def _number(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() else value


def judge_answer(user: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Return a judge's answer to the case in ``user`` (``grading.judge.user_message``), valid for ``schema``."""
    status = _STATUS.search(user)
    failures = []
    if status and status["status"] != "succeeded":
        failures.append(f"the run {status['status']}" + (f" ({status['error']})" if status["error"] else ""))
    for line in _section(user, "Tool calls"):
        tool = _TOOL.match(line)
        if tool and tool["status"] in _BAD_TOOL:
            failures.append(f"{tool['tool']} {tool['status']}" + (f" ({tool['error']})" if tool["error"] else ""))
    good = not failures
    said = "the run succeeded and every tool call answered" if good else "; ".join(failures)
    scales = {m["id"]: (m["low"], m["high"]) for m in map(_SCALE.match, _section(user, "Metrics")) if m}
    metric_ids = ((schema.get("properties") or {}).get("metrics") or {}).get("required") or []
    metrics = {}
    for metric_id in metric_ids:
        low, high = scales.get(metric_id, ("0", "1"))
        metrics[metric_id] = _number(high if good else low)
    requirements = [line[2:].strip() for line in _section(user, "Requirements")] or ["The run as a whole"]
    criteria = [
        {
            "criterion": requirement,
            "scope": "run",
            "passed": good,
            "score": 1.0 if good else 0.3,
            "reasoning": f"Met: {said}." if good else f"Not met: {said}.",
            "evidence": said,
        }
        for requirement in requirements
    ]
    tasks = [
        {"id": line[2:].split(":", 1)[0].strip(), "score": 1.0 if good else 0.3} for line in _section(user, "Tasks")
    ]
    return {
        "criteria": criteria,
        "overall_score": 1.0 if good else 0.3,
        "passed": good,
        "failure_category": ""
        if good
        else ("run failed" if status and status["status"] != "succeeded" else "tool error"),
        "feedback": f"Demo judge: {said}.",
        "metrics": metrics,
        "tasks": tasks,
    }
