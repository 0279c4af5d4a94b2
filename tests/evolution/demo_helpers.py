"""The embedded default for loop tests: the bundled demo brain, the demo model, the local forge, eager Celery."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from grading.demo import TRIAGE_PATH
from grading.models import Entity, Execution
from grading.runners import run_entity
from grading.sync import sync_brain
from hitl.actions import answer_card
from hitl.models import Card
from singularity.brain.git import clone, git

SABOTEUR_SCENARIO = """---
name: Saboteur
description: A proposer that drops every rule but the fallback (for the regression test).
evaluation:
  enabled: false
loop:
  enabled: false
---

A pipeline that makes the triage worse.
"""

SABOTEUR = """
def run(ctx, brief):
    definition = brief["definition"]["content"]
    head, sep, _ = definition.partition("## Rules")
    return {
        "summary": "Keep only the fallback rule",
        "hypothesis": "Fewer rules, fewer mistakes.",
        "files": [{"path": "features/support/triage/triage.scenario.md", "content": head + sep + "\\n\\n- otherwise -> general\\n"}],
        "citedLessons": [],
    }
"""


def brain_with_the_fixer(source: Path, target: Path) -> Path:
    """A copy of the demo brain whose triage hands its changes to the fixer pipeline, not the proposer agent.

    The loop's end-to-end tests are about the rounds, the check, the watch and the forge: the fixer writes the
    same kind of change as the demo agent, in-process, with no read-only connection (which on SQLite sees only
    committed rows). The agent's own story is tests/evolution/test_demo_proposer.py's.
    """
    import shutil

    shutil.copytree(source, target)
    path = target / TRIAGE_PATH
    text = path.read_text()
    assert "\n  proposer:\n    pipeline: null\n" in text
    path.write_text(text.replace("\n  proposer:\n    pipeline: null\n", "\n  proposer:\n    pipeline: fixer\n", 1))
    return target


def brain_without_check(target: Path) -> Path:
    """The brain copy ``target`` with its classifiers declaring ``check: {mode: none}`` (no pre-merge check)."""
    for rel in ("features/support/triage/triage.scenario.md", "features/support/urgency/urgency.scenario.md"):
        path = target / rel
        text = path.read_text()
        assert "\nloop:\n  enabled: true\n" in text, rel
        if re.search(r"^  check: .*$", text, re.M):
            text = re.sub(r"^  check: .*$", "  check: {mode: none}", text, count=1, flags=re.M)
        else:
            text = text.replace("\nloop:\n  enabled: true\n", "\nloop:\n  enabled: true\n  check: {mode: none}\n", 1)
        path.write_text(text)
    return target


@pytest.fixture
def embedded(settings, tmp_path: Path, celery_eager, request):
    settings.DEMO_BRAIN_DIR = brain_with_the_fixer(Path(settings.DEMO_BRAIN_DIR), tmp_path / "demo-brain")
    if request.node.get_closest_marker("no_check"):
        # A test of the watch, the revert or the merge gate alone: the classifiers skip the pre-merge check.
        brain_without_check(settings.DEMO_BRAIN_DIR)
    settings.VAR_DIR = tmp_path
    settings.BRAIN_REPO = ""
    settings.BRAIN_CHECKOUT = tmp_path / "brain"
    settings.LOOP_WORK_DIR = tmp_path / "loop"
    settings.BRAMA_BASE_URL = ""
    settings.DEMO_DRIVER = False
    settings.SINGULARITY_PUBLIC_URL = "http://dash.example"
    sync_brain()
    return settings


@contextmanager
def celery_eager_on() -> Iterator[None]:
    """Celery runs every task inline (the worker's part of ``make run``) inside the block."""
    from singularity.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = before


@pytest.fixture
def celery_eager():
    with celery_eager_on():
        yield


def tickets() -> list[dict]:
    from django.conf import settings

    path = Path(settings.DEMO_BRAIN_DIR) / "features/support/triage/tickets.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def triage() -> Entity:
    return Entity.objects.get(path=TRIAGE_PATH, present=True)


def run(ticket: dict) -> Execution:
    return run_entity(triage(), input=ticket, source=Execution.Source.DEMO)


def wrong(execution: Execution) -> bool:
    return (execution.output or {}).get("result") != execution.input["_expected"]


def pending_card(kind: str) -> Card:
    return Card.objects.filter(producer="loop", kind=kind, status=Card.Status.PENDING).latest("created_at")


def press(card: Card, user, choice: str, **kwargs) -> None:
    result = answer_card(card.pk, user=user, is_agent=False, choice=choice, via="dashboard", **kwargs)
    assert result.ok, result.detail


def drive_until_card(pool: list[dict]) -> tuple[Card, list[dict]]:
    """Run tickets from ``pool`` (bad ones first) until the loop asks a person; return the card and what failed."""
    failed = []
    for ticket in pool:
        execution = run(ticket)
        if wrong(execution):
            failed.append(ticket)
        card = Card.objects.filter(producer="loop", status=Card.Status.PENDING).first()
        if card is not None:
            return card, failed
    raise AssertionError("no decide card after the whole pool")


def person_commits(settings, files: dict[str, str], tmp_path: Path, message: str) -> None:
    """A person edits the brain: clone the bare repository, commit, push; then the engine syncs."""
    work = clone(str(Path(settings.VAR_DIR) / "brain.git"), tmp_path / f"person-{len(files)}-{message[:5]}")
    for rel, text in files.items():
        target = work.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git("add", "--all", ".", cwd=work.path)
    git("commit", "--quiet", "-m", message, cwd=work.path)
    git("push", "--quiet", "origin", "main", cwd=work.path)
    sync_brain()
