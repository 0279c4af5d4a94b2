"""A real git brain for the loop-settings tests: a commented manifest, three entities, the engine's checkout synced.

``settings_brain`` points the forge (settings.BRAIN_REPO) and the engine's
checkout (settings.BRAIN_CHECKOUT) at a fresh bare origin, syncs the rows and
returns helpers to read the origin's default branch.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grading.models import Entity
from grading.sync import sync_brain
from singularity.brain.git import git
from tests.grading.brain_helpers import Brain

MANIFEST = "constitution/MANIFEST.yaml"
DIGEST = "features/support/digest/digest.scenario.md"
PRICING = "features/pricing/pricing.scenario.md"
PULSE = "features/ops/pulse/pulse.heartbeat.md"

MANIFEST_TEXT = """\
# The brain's manifest: brain-wide defaults.
#   The settings editor writes this file back; these comments stay.

evaluation:
  sample: { rate: 1 }     # grade every run

loop:
  preset: repair          # repair | evolve
  # Who answers the two gates, brain-wide.
  autonomy:
    decide: human         # a person accepts
    merge: human
  trigger:
    windowRuns: 5

  cooldownHours: 6   # between cycles
"""

DIGEST_TEXT = """\
---
name: Digest   # shown on the dashboard
description: 'Writes the daily digest'
# Grading: no judge, computed metrics only.
evaluation:
  enabled: true
  method: none
loop:
  enabled: true
  autonomy: { decide: human }   # a person decides this one
  editablePaths:
    - features/support/digest/notes.md   # the notes
  maxChangedLines: 200
---
Write the digest.
---
Keep it short.
"""

PRICING_TEXT = """\
---
name: Pricing
evaluation:
  enabled: true
  method: none
loop:
  enabled: true
  threshold: 0.5
---
Price it.
"""

PULSE_TEXT = """\
---
name: Pulse
enabled: false   # paused
schedule: '*/5 * * * *'
evaluation:
  method: none
---
Check the pulse.
"""

FILES: dict[str, str | bytes | None] = {
    MANIFEST: MANIFEST_TEXT,
    DIGEST: DIGEST_TEXT,
    "features/support/digest/notes.md": "Notes.\n",
    PRICING: PRICING_TEXT,
    PULSE: PULSE_TEXT,
    "constitution/Evaluation/Methods/default.md": "# Run Evaluation\n\nJudge fairly.\n",
}


@dataclass
class SettingsBrain:
    brain: Brain

    def head(self) -> str:
        return git("rev-parse", "main", cwd=self.brain.origin).decode().strip()

    def show(self, path: str, commit: str = "main") -> str:
        """The text of ``path`` on the origin's default branch (or at ``commit``)."""
        return git("show", f"{commit}:{path}", cwd=self.brain.origin).decode()

    def commit(self, files: dict[str, str | bytes | None], message: str = "A person's edit") -> str:
        """A person's commit pushed straight to main from their own clone."""
        work = self.brain.work.path
        git("fetch", "--quiet", "origin", cwd=work)
        git("reset", "--quiet", "--hard", "origin/main", cwd=work)
        return self.brain.commit(files, message)

    def entity(self, kind: str, slug: str) -> Entity:
        return Entity.objects.get(target_kind=kind, slug=slug)

    @property
    def digest(self) -> Entity:
        return self.entity("scenario", "digest")

    @property
    def pricing(self) -> Entity:
        return self.entity("scenario", "pricing")

    @property
    def pulse(self) -> Entity:
        return self.entity("heartbeat", "pulse")


def settings_brain(root: Path, settings: Any, files: dict[str, str | bytes | None] | None = None) -> SettingsBrain:
    """The test brain as the forge's remote and the engine's checkout, synced into Entity rows."""
    brain = Brain(root / "brain", {**FILES, **(files or {})})
    settings.BRAIN_REPO = str(brain.origin)
    settings.BRAIN_BRANCH = "main"
    settings.BRAIN_CHECKOUT = brain.checkout.path
    settings.LOOP_FORGE = "local"
    settings.LOOP_WORK_DIR = root / "loop"
    settings.LOOP_SETTINGS_LOCK = root / "loop-settings.lock"
    settings.SINGULARITY_PUBLIC_URL = "http://singularity.test"
    report = sync_brain()
    assert report.ok, report.summary()
    return SettingsBrain(brain=brain)


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """(lines of ``before`` that ``after`` lost or changed, lines ``after`` added), compared byte for byte."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    lost, added = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            lost += old[i1:i2]
            added += new[j1:j2]
    return lost, added


def client_for(user: Any, *, agent: bool = False) -> Any:
    """An API client holding a fresh token of ``user``'s: an agent's ("bot") or a person's script's ("script")."""
    from rest_framework.test import APIClient

    from singularity.models import ApiToken

    _, key = ApiToken.issue(user, "bot" if agent else "script", is_agent=agent)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def sha(text: str) -> str:
    """The SHA-256 a brain file's write swaps against."""
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()
