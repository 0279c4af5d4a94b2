"""The demo brain's chat role: talked to offline through the demo model, its episode judged whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from grading.booking import on_terminal
from grading.chat.episodes import Counterpart, close, say
from grading.grade import grade_now
from grading.models import Entity, Episode, Execution
from grading.sync import sync_brain

pytestmark = pytest.mark.django_db


def test_the_demo_helpdesk_answers_offline_and_its_episode_is_judged(settings, tmp_path: Path, alice) -> None:
    settings.VAR_DIR = tmp_path
    settings.BRAIN_REPO = ""
    settings.BRAIN_CHECKOUT = tmp_path / "brain"
    settings.BRAMA_BASE_URL = ""
    settings.SINGULARITY_MCP_CONFIG = ""
    sync_brain()
    role = Entity.objects.get(target_kind="role", slug="helpdesk")
    assert role.kind == "role" and role.ok and role.evaluation_enabled
    assert role.terms["chat"]["episode"]["idleHours"] == 0.5
    assert role.terms["evaluation"]["context"]["priorEpisodes"] == 1
    turn = say(role, Counterpart(user=alice), "Where is my parcel?", "dashboard")
    assert turn.text and not turn.error
    episode = Episode.objects.get()
    close(episode, "person")
    grade = grade_now(on_terminal(Execution.objects.get(pk=episode.pk)))
    assert grade.status == "graded", grade.error
    assert grade.judge["method"] == "default" and "quality" in grade.metrics
