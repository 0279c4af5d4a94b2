"""A real brain repository for the forge, diff gate, apply and revert tests.

``forge_brain`` builds a bare origin holding two markdown entities, a loop
module, the judge's files and the manifest; points settings.BRAIN_REPO at it
and settings.LOOP_WORK_DIR at the test's temporary folder; and makes the
Entity rows the gate reads (``digest`` is the entity in the loop,
``pricing`` another entity with a pipeline).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.utils import timezone

from evolution.forges.local import LocalForge
from evolution.models import Cycle, Round
from grading.models import Entity
from singularity.brain.git import git
from tests.grading.brain_helpers import Brain, md
from tests.grading.grading_helpers import make_entity

DIGEST_PATH = "features/digest/digest.scenario.md"
PRICING_PATH = "features/pricing/pricing.scenario.md"

DIGEST = md(
    """
name: Digest
description: Writes the daily digest
# The judge reads these; the loop may not move them.
evaluation:
  enabled: true
  method: none
loop:
  enabled: true
  maxChangedLines: 600
""",
    "Write the digest.\nKeep it short.\n",
)

PRICING = md(
    """
name: Pricing
evaluation:
  enabled: true
loop:
  enabled: true
""",
    "Price it.\n",
)

FILES: dict[str, str | bytes | None] = {
    DIGEST_PATH: DIGEST,
    "features/digest/digest.loop.py": "CASES = []\n",
    "features/digest/notes.md": "Line one.\nLine two.\n",
    "features/digest/style.md": "Be brief.\n",
    PRICING_PATH: PRICING,
    "features/pricing/pricing.pipeline.py": "PRICE = 10\n",
    "constitution/MANIFEST.yaml": "loop:\n  trigger:\n    windowRuns: 5\n",
    "constitution/Evaluation/Methods/default.md": "Judge fairly.\n",
    "integrations/billing.py": "RATE = 1\n",
    "tools/helper.py": "def help():\n    return 1\n",
}


@dataclass
class ForgeBrain:
    """The brain's repository (``brain.origin`` is the forge's remote), the forge, and the entities."""

    brain: Brain
    forge: LocalForge
    digest: Entity
    pricing: Entity

    def branch_sha(self, branch: str) -> str | None:
        return self.forge.branch_sha(branch)

    def show(self, commit: str, path: str) -> str:
        """The text of ``path`` at ``commit`` in the origin."""
        return git("show", f"{commit}:{path}", cwd=self.brain.origin).decode()

    def parents(self, commit: str) -> list[str]:
        return git("rev-list", "--parents", "-n", "1", commit, cwd=self.brain.origin).decode().split()[1:]

    def push_branch(self, branch: str, files: dict[str, str | bytes | None], message: str = "A change") -> str:
        """Commit ``files`` on a new ``branch`` cut from main in the person's clone, push it; return its head."""
        work = self.brain.work.path
        git("fetch", "--quiet", "origin", cwd=work)
        git("checkout", "--quiet", "-B", branch, "origin/main", cwd=work)
        from tests.grading.brain_helpers import write_files

        write_files(work, files)
        git("add", "--all", ".", cwd=work)
        git("commit", "--quiet", "-m", message, cwd=work)
        git("push", "--quiet", "--force", "origin", f"{branch}:{branch}", cwd=work)
        head = git("rev-parse", "HEAD", cwd=work).decode().strip()
        git("checkout", "--quiet", "main", cwd=work)
        git("reset", "--quiet", "--hard", "origin/main", cwd=work)
        return head

    def commit_main(self, files: dict[str, str | bytes | None], message: str = "Edit the brain") -> str:
        """A person's commit pushed straight to main; return it."""
        work = self.brain.work.path
        git("fetch", "--quiet", "origin", cwd=work)
        git("checkout", "--quiet", "main", cwd=work)
        git("reset", "--quiet", "--hard", "origin/main", cwd=work)
        return self.brain.commit(files, message)


def forge_brain(
    root: Path, settings: Any, *, files: dict[str, str | bytes | None] | None = None, **loop: Any
) -> ForgeBrain:
    """The test brain as the forge's remote; ``loop`` adds keys to the digest entity's loop block."""
    brain = Brain(root / "brain", {**FILES, **(files or {})})
    settings.BRAIN_REPO = str(brain.origin)
    settings.BRAIN_BRANCH = "main"
    settings.BRAIN_CHECKOUT = root / "checkout"  # the engine's own clone of this brain, never the repo's var/
    settings.LOOP_WORK_DIR = root / "loop"
    settings.SINGULARITY_PUBLIC_URL = "http://singularity.test"
    settings.LOCAL_FORGE_REQUIRED_STATUSES = ["singularity/diff-gate"]
    digest = make_entity("digest", evaluation={"method": "none"}, loop={"enabled": True, **loop})
    pricing = make_entity("pricing", kind="pipeline", evaluation={"method": "none"}, loop={"enabled": True})
    Entity.objects.filter(pk=digest.pk).update(path=DIGEST_PATH, loop_module_path="features/digest/digest.loop.py")
    Entity.objects.filter(pk=pricing.pk).update(path=PRICING_PATH, pipeline_path="features/pricing/pricing.pipeline.py")
    digest.refresh_from_db()
    pricing.refresh_from_db()
    return ForgeBrain(brain=brain, forge=LocalForge(), digest=digest, pricing=pricing)


def make_round(entity: Entity, files: list[dict[str, Any]], **fields: Any) -> Round:
    """An accepted round 1 of a fresh cycle of ``entity`` proposing ``files``."""
    now = timezone.now()
    cycle = Cycle.objects.create(
        entity=entity,
        key=f"test:{entity.pk}:{now.isoformat()}:{Cycle.objects.count()}",
        origin=Cycle.Origin.REQUEST,
        phase=Cycle.Phase.APPLYING,
    )
    return Round.objects.create(
        cycle=cycle,
        number=1,
        status=Round.Status.ACCEPTED,
        author=fields.pop("author", "agent:test"),
        summary=fields.pop("summary", "Say the digest's length out loud"),
        hypothesis=fields.pop("hypothesis", "A stated length keeps the digest short."),
        files=files,
        **fields,
    )


def edited_digest(body: str = "Write the digest.\nKeep it under 200 words.\n") -> str:
    """The digest's file with its frontmatter untouched and ``body`` as its new body."""
    head, _, _ = DIGEST.partition("---\nWrite")
    return head + "---\n" + body
