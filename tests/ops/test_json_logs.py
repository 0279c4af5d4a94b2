"""LOG_FORMAT=json: one JSON object a line — time, level, logger, message, the ids in hand — even for a message
with newlines; a request's records carry its request id."""

from __future__ import annotations

import json
import subprocess
import sys

from singularity.settings import BASE_DIR
from tests.ops.server import environment

SCRIPT = r"""
import logging
import django
django.setup()
from singularity.ops import context
log = logging.getLogger("grading.grade")
log.warning("gateway said:\n\n502 Bad Gateway\n\nretrying")
with context.bound(run_id="run-42", cycle_id="7", being_id="3"):
    log.error("judge failed")
try:
    raise ValueError("boom\nsecond line")
except ValueError:
    log.exception("grading crashed")
from django.test import Client
Client().get("/no-such-page/", HTTP_X_REQUEST_ID="req-abc-123", HTTP_HOST="localhost")
"""


def run_logged(tmp_path, **env_extra: str) -> list[str]:
    env = environment(tmp_path / "var", LOG_FORMAT="json", DJANGO_SETTINGS_MODULE="singularity.settings", **env_extra)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stderr.splitlines() if line.strip()]


def test_every_line_is_one_json_record_and_newlines_stay_inside(tmp_path):
    lines = run_logged(tmp_path)
    records = [json.loads(line) for line in lines]  # every line parses: nothing split, nothing plain
    gateway = next(r for r in records if r["message"].startswith("gateway said:"))
    assert gateway["message"] == "gateway said:\n\n502 Bad Gateway\n\nretrying"
    assert {"time", "level", "logger", "message"} <= set(gateway)
    assert gateway["level"] == "WARNING" and gateway["logger"] == "grading.grade"
    judge = next(r for r in records if r["message"] == "judge failed")
    assert (judge["run_id"], judge["cycle_id"], judge["being_id"]) == ("run-42", "7", "3")
    crash = next(r for r in records if r["message"] == "grading crashed")
    assert "ValueError: boom\nsecond line" in crash["exc"] and "run_id" not in crash
    not_found = next(r for r in records if r["logger"] == "django.request")
    assert not_found["request_id"] == "req-abc-123"


def test_an_unknown_log_format_is_refused_naming_the_variable(tmp_path):
    env = environment(tmp_path / "var", LOG_FORMAT="xml")
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "configuration error: LOG_FORMAT: expected plain or json, got 'xml'"
