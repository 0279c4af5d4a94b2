"""The forge tests' brain on the fake GitHub: a seeded repository, the GitHub forge, a person who pushes.

``github_brain`` seeds the fake's bare repository with the forge tests' files
(``forge_helpers.FILES``) and makes the same entity rows; ``push`` commits
files on a branch in a clone made over HTTP with the real git client (the
forge's own credential header authenticates it) and pushes it, as a person
or a CI would.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

from evolution.forges.github import GitHubForge
from grading.models import Entity
from singularity.brain.git import git
from tests.evolution.forge_helpers import DIGEST_PATH, FILES, PRICING_PATH
from tests.fakes.github import FakeGitHub
from tests.grading.brain_helpers import write_files
from tests.grading.grading_helpers import make_entity

_clones = count(1)


@dataclass
class GitHubBrain:
    fake: FakeGitHub
    forge: GitHubForge
    digest: Entity
    pricing: Entity
    root: Path

    def push(
        self, branch: str, files: dict[str, str | bytes | None], *, base: str = "main", message: str = "A change"
    ) -> str:
        """Commit ``files`` on ``branch`` (cut from ``base`` when new) in a fresh clone over HTTP, push; the head."""
        return push(self.fake, self.root, branch, files, base=base, message=message)


def push(
    fake: FakeGitHub,
    root: Path,
    branch: str,
    files: dict[str, str | bytes | None],
    *,
    base: str = "main",
    message: str = "A change",
) -> str:
    work = root / f"pusher-{next(_clones)}"
    git("clone", "--quiet", fake.git_url, str(work))
    if fake.tip(branch):
        git("checkout", "--quiet", branch, cwd=work)
    else:
        git("checkout", "--quiet", "-b", branch, f"origin/{base}", cwd=work)
    write_files(work, files)
    git("add", "--all", ".", cwd=work)
    git("commit", "--quiet", "-m", message, cwd=work)
    git("push", "--quiet", "origin", f"{branch}:{branch}", cwd=work)
    return git("rev-parse", "HEAD", cwd=work).decode().strip()


def github_brain(
    root: Path, settings: Any, fake: FakeGitHub, *, files: dict[str, Any] | None = None, **loop: Any
) -> GitHubBrain:
    """The forge tests' brain as the fake's repository (``github_on`` must be in force)."""
    source = root / "brain-source"
    write_files(source, {**FILES, **(files or {})})
    fake.seed(source)
    settings.LOOP_WORK_DIR = root / "loop"
    settings.SINGULARITY_PUBLIC_URL = "http://singularity.test"
    digest = make_entity("digest", evaluation={"method": "none"}, loop={"enabled": True, **loop})
    pricing = make_entity("pricing", kind="pipeline", evaluation={"method": "none"}, loop={"enabled": True})
    Entity.objects.filter(pk=digest.pk).update(path=DIGEST_PATH, loop_module_path="features/digest/digest.loop.py")
    Entity.objects.filter(pk=pricing.pk).update(path=PRICING_PATH, pipeline_path="features/pricing/pricing.pipeline.py")
    digest.refresh_from_db()
    pricing.refresh_from_db()
    return GitHubBrain(fake=fake, forge=GitHubForge(), digest=digest, pricing=pricing, root=root)
