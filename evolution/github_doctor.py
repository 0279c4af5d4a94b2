"""The doctor's "GitHub merge gate" section: whether the repository can hold what the loop asks of it.

Seed 003, "What your repository must require" and "GitHub (GitHub merge gate)":

- with no entity in the loop nothing opens a pull request, so the check passes
  without asking GitHub (nor under the local forge);
- whether the loop's credential may post a commit status, asked of GitHub by
  posting one on a commit that cannot exist (422: it may; 403: it may not;
  GitHub writes nothing either way) — a refusal outranks every other finding,
  so it comes first;
- whether the base branch requires both ``singularity/diff-gate`` and
  ``singularity/validation`` (classic protection or rulesets): the pre-merge
  check posts the second on the checked head, so a base that does not require
  it lets anyone merge a candidate the check found worse; and whether the plan
  allows branch rules on a private repository at all;
- whether ``allow_auto_merge`` is on when some entity declares ``merge: auto``
  (a hint when the credential cannot see it);
- how a ``merge: auto`` round lands (issue 32): once its statuses are posted a
  PR that requires nothing beyond the loop's own is clean, GitHub refuses to
  arm a clean PR ("Pull request is in clean status"), and the loop merges it
  through GitHub's merge endpoint bound to the checked head and the
  configured method — what the arm would have done at that moment; with a CI
  still running the arm holds and GitHub merges. A base requiring nothing
  still refuses every arm (a person merges);
- when the webhook last delivered.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.conf import settings

from evolution.forges.base import DIFF_GATE, VALIDATION
from evolution.steering import autonomy
from grading.doctor import FAIL, PASS, WARN, Check, DoctorContext, section
from grading.models import Entity
from singularity.display import ago_text
from singularity.errors import SingularityError

if TYPE_CHECKING:
    from evolution.forges.github import GitHubForge, Requirements

NAME = "GitHub merge gate"
OURS = frozenset({DIFF_GATE, VALIDATION})


def _label(entity: Entity) -> str:
    return f"{entity.target_kind}:{entity.slug}"


def _merge_auto(entities: list[Entity]) -> list[Entity]:
    return [e for e in entities if autonomy.policy(e).get("merge") == autonomy.AUTO]


@section(NAME)
def github_merge_gate_section(ctx: DoctorContext) -> Iterator[Check]:
    in_loop = [e for e in ctx.ok_entities() if e.loop_enabled]
    if not in_loop:
        yield Check(PASS, "no entity is in the loop: nothing opens a pull request for a rule to hold")
        return
    if settings.LOOP_FORGE != "github":
        yield Check(PASS, f"LOOP_FORGE is {settings.LOOP_FORGE}: the loop's pull requests are not on GitHub")
        return
    from evolution.forges.github import GitHubError, GitHubForge

    try:
        forge = GitHubForge()
    except SingularityError as exc:
        yield Check(FAIL, f"the GitHub forge cannot start: {exc}")
        return
    yield from _credential(forge)
    branch = forge.default_branch()
    try:
        facts = forge.repository_facts()
    except GitHubError as exc:
        yield Check(FAIL, f"{forge.repository} cannot be read: {exc}")
        return
    required = forge.requirements(branch)
    auto = _merge_auto(in_loop)
    yield from _rules(forge.repository, branch, facts, required)
    yield from _auto_merge_setting(forge.repository, facts, auto)
    for entity in auto:
        yield from _arms(entity, branch, required.contexts)
    yield from _webhook()


def _credential(forge: GitHubForge) -> Iterator[Check]:
    may, why = forge.may_post_statuses()
    who, repository = forge.credential.label, forge.repository
    if may is False:
        fix = (
            "accept statuses: write on the App's installation"
            if forge.credential.lane == "app"
            else "give the token Commit statuses: Read and write (fine-grained) or repo (classic)"
        )
        yield Check(
            FAIL,
            f"{who} may not post commit statuses on {repository} (GitHub answered 403: {why}): every apply round "
            f"fails on it before its PR opens — {fix}",
        )
    elif may is None:
        yield Check(WARN, f"whether {who} may post commit statuses on {repository} could not be told: {why}")
    else:
        yield Check(PASS, f"{who} may post commit statuses on {repository} ({why})")


def _rules(repository: str, branch: str, facts: dict[str, Any], required: Requirements) -> Iterator[Check]:
    contexts = required.contexts
    if required.unavailable and facts.get("private"):
        yield Check(
            WARN,
            f"{repository} is private on a plan without branch rules (GitHub answered: "
            f"{required.unavailable}): no status can be required, so every merge: auto gate demotes to a person — "
            "make the repository public, or move it to GitHub Pro (personal account) or Team (organization)",
        )
    for problem in required.unreadable:
        yield Check(WARN, f"the rules on {branch} could not all be read: {problem}")
    missing = [c for c in (DIFF_GATE, VALIDATION) if c not in contexts]
    if not missing:
        sources = ", ".join(required.sources) or "its rules"
        yield Check(PASS, f"{branch} requires {DIFF_GATE} and {VALIDATION} ({sources})")
    elif required.unavailable:
        return
    else:
        what = " and ".join(missing)
        harm = {
            DIFF_GATE: "a commit the diff gate never read",
            VALIDATION: "a candidate the pre-merge check found worse (or has not answered on)",
        }
        yield Check(
            WARN,
            f"{branch} does not require {what}: anyone can merge "
            + " or ".join(harm[c] for c in missing)
            + (", and GitHub holds no auto-merge on a PR nothing gates (every merge: auto round falls to a person)"
               if not contexts else "")
            + f" — add a ruleset (or classic protection) on {branch} requiring both {DIFF_GATE} and {VALIDATION}",
        )  # fmt: skip


def _auto_merge_setting(repository: str, facts: dict[str, Any], auto: list[Entity]) -> Iterator[Check]:
    if not auto:
        return
    names = ", ".join(_label(e) for e in auto)
    allowed = facts.get("allow_auto_merge")
    if allowed is False:
        yield Check(
            WARN,
            f"{repository} does not allow auto-merge, and {names} declare{'s' if len(auto) == 1 else ''} merge: auto: "
            "every arm is refused and each round falls to a person — turn on Settings → General → Pull Requests → "
            "Allow auto-merge",
        )
    elif allowed is None:
        yield Check(
            PASS,
            f"hint: GitHub does not show this credential whether {repository} allows auto-merge (that takes push or "
            f"admin access); {names} declare{'s' if len(auto) == 1 else ''} merge: auto — check Settings → General → "
            "Allow auto-merge",
        )


def _arms(entity: Entity, branch: str, contexts: frozenset[str]) -> Iterator[Check]:
    """How a merge: auto round of ``entity`` lands on ``branch`` (issue 32's clean-status merge), as a hint."""
    if not contexts:
        return  # ``_rules`` warned: GitHub refuses every arm, a person merges
    beyond_ours = sorted(contexts - OURS)
    if beyond_ours:
        others = ", ".join(beyond_ours)
        how = (
            f'once {others} passed too the PR is clean: GitHub refuses to arm a clean PR ("Pull request is in '
            'clean status"), so the loop merges it through GitHub bound to the checked head and mergeMethod; while '
            f"{others} still runs the arm holds and GitHub merges it"
        )
    else:
        how = (
            f"{branch} requires nothing beyond the loop's own statuses, so the PR is clean once they are posted: "
            'GitHub refuses to arm a clean PR ("Pull request is in clean status") and the loop merges it through '
            "GitHub bound to the checked head and mergeMethod; its revert PRs (both statuses success as they open) "
            "land the same way"
        )
    yield Check(PASS, f"hint: {_label(entity)} declares merge: auto: {how}")


def _webhook() -> Iterator[Check]:
    from evolution.forges.github_webhook import last_delivery

    if not settings.GITHUB_WEBHOOK_SECRET:
        yield Check(
            WARN,
            "GITHUB_WEBHOOK_SECRET is not set: /github/webhook/ answers every delivery 401, so every merge wait "
            "runs on its poll (latency, not correctness)",
        )
        return
    last = last_delivery()
    if last is None:
        yield Check(
            WARN,
            "GitHub has not delivered to /github/webhook/ yet: every merge wait runs on its poll (latency, not "
            "correctness) — point the webhook (the App's, or the repository's) at "
            f"{settings.SINGULARITY_PUBLIC_URL.rstrip('/')}/github/webhook/ with Pull request events, active",
        )
        return
    what = f"{last.event} {last.action}".strip()
    yield Check(PASS, f"the webhook last delivered {ago_text(last.received_at)} ({what}: {last.outcome})")
