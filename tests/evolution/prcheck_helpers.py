"""A person's pull requests against the demo brain's triage, for the pre-merge check of any PR (issue 35)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings as django_settings

from evolution.forges.local import LocalForge
from grading.demo import TRIAGE_PATH
from grading.models import Grade
from singularity.brain.git import clone, git
from tests.evolution.demo_helpers import run, tickets, triage

#: Only the fallback: every billing and technical ticket goes wrong.
BROKEN = "- otherwise -> general\n"
#: Keywords the demo tickets need (the demo's own rules miss "crashes" and "payment").
FIXED = (
    "- refund, charged twice, invoice, payment -> billing\n- crash, crashes, error, bug -> technical\n"
    "- otherwise -> general\n"
)


def triage_with(rules: str) -> str:
    text = (Path(django_settings.BRAIN_CHECKOUT) / TRIAGE_PATH).read_text()
    head, sep, _ = text.partition("## Rules")
    return head + sep + "\n\n" + rules


def person_opens_pr(tmp_path: Path, branch: str, files: dict[str, str]) -> int:
    """A person pushes ``branch`` with ``files`` changed and opens a PR of it into main; return its number."""
    work = clone(str(Path(django_settings.VAR_DIR) / "brain.git"), tmp_path / f"pr-{branch.replace('/', '-')}")
    git("checkout", "--quiet", "-b", branch, cwd=work.path)
    for rel, text in files.items():
        (work.path / rel).write_text(text)
    git("commit", "--quiet", "-am", f"A person's change: {branch}", cwd=work.path)
    git("push", "--quiet", "origin", branch, cwd=work.path)
    return LocalForge().open_pull(head=branch, base="main", title=branch, body="").number


def graded_history(count: int = 6) -> None:
    for ticket in tickets()[:count]:
        run(ticket)
    assert Grade.objects.filter(entity=triage(), status=Grade.Status.GRADED).exists()
