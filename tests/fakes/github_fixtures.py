"""Pytest fixtures for the fake GitHub, loaded by ``tests/conftest.py`` through ``pytest_plugins``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.github import TOKEN, WEBHOOK_SECRET, FakeGitHub


@pytest.fixture
def fake_github(tmp_path: Path) -> Iterator[FakeGitHub]:
    """Yield a started fake GitHub on loopback (its repository not yet seeded); it is stopped after the test."""
    with FakeGitHub(tmp_path / "github") as fake:
        yield fake


@pytest.fixture
def github_on(settings: Any, fake_github: FakeGitHub) -> FakeGitHub:
    """LOOP_FORGE=github against the fake, on the token lane, with no waits between writes or retries."""
    settings.LOOP_FORGE = "github"
    settings.GITHUB_API_URL = fake_github.api_url
    settings.GITHUB_REPOSITORY = fake_github.full_name
    settings.GITHUB_TOKEN = TOKEN
    settings.GITHUB_APP_ID = 0
    settings.GITHUB_APP_PRIVATE_KEY_FILE = ""
    settings.GITHUB_APP_INSTALLATION_ID = 0
    settings.GITHUB_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.GITHUB_RETRIES = 3
    settings.GITHUB_RETRY_BACKOFF_SECS = 0.01
    settings.GITHUB_RETRY_MAX_WAIT_SECS = 5.0
    settings.GITHUB_SECONDS_BETWEEN_WRITES = 0.0
    settings.GITHUB_TIMEOUT_SECS = 10.0
    settings.BRAIN_REPO = fake_github.git_url
    settings.BRAIN_BRANCH = "main"
    return fake_github


@pytest.fixture
def on_github(settings: Any, tmp_path: Path, celery_eager: None, github_on: FakeGitHub, request: Any) -> FakeGitHub:
    """The demo brain as the fake GitHub's repository, the engine's checkout cloned from it over HTTP.

    The default branch requires singularity/diff-gate (classic protection); Celery runs tasks inline.
    """
    from evolution.forges.base import DIFF_GATE
    from grading.sync import sync_brain

    settings.VAR_DIR = tmp_path
    settings.BRAIN_CHECKOUT = tmp_path / "brain"
    settings.LOOP_WORK_DIR = tmp_path / "loop"
    settings.BRAMA_BASE_URL = ""
    settings.DEMO_DRIVER = False
    settings.SINGULARITY_PUBLIC_URL = "http://dash.example"
    from tests.evolution.demo_helpers import brain_with_the_fixer, brain_without_check

    brain = brain_with_the_fixer(Path(settings.DEMO_BRAIN_DIR), tmp_path / "demo-brain")
    if request.node.get_closest_marker("no_check"):
        brain_without_check(brain)
    github_on.seed(brain)
    github_on.protection = [DIFF_GATE]
    sync_brain()
    return github_on
