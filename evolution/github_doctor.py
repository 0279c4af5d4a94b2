"""The doctor's "GitHub merge gate" section: whether the repository can hold what the loop asks of it.

Seed 003, "What your repository must require" and "GitHub (GitHub merge gate)":

- with no entity in the loop nothing opens a pull request, so the check passes
  without asking GitHub (nor under the local forge);
- whether the loop's credential may post a commit status, asked of GitHub by
  posting one on a commit that cannot exist (422: it may; 403: it may not;
  GitHub writes nothing either way) — a refusal outranks every other finding,
  so it comes first;
- whether the base branch requires ``singularity/diff-gate`` and
  ``singularity/validation`` (classic protection or rulesets), as the seed
  asks — without the second a person can merge a change the pre-merge check
  turned down — and whether the plan allows branch rules on a private
  repository at all;
- whether ``allow_auto_merge`` is on when some entity declares ``merge: auto``
  (a hint when the credential cannot see it);
- arms GitHub will refuse every time: a PR whose required statuses are all
  set before it opens is clean the moment it opens, and GitHub refuses
  auto-merge on a clean PR. ``singularity/diff-gate`` is set before an apply
  PR opens; ``singularity/validation`` is pending from the pre-merge check's
  start until it answers, but set ``success`` at once ("no pre-merge check")
  on the PR of an entity that has none (``check.mode: none``, a heartbeat or
  a pipeline). A revert PR carries both as it opens, so its arm holds only
  on a required check beyond the loop's own;
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
    elif missing == [VALIDATION]:
        yield Check(
            WARN,
            f"{branch} requires {DIFF_GATE} but not {VALIDATION}: a person can merge a change the pre-merge check "
            f"turned down or could not show works — add {VALIDATION} to the ruleset (or classic protection) on {branch}",
        )
    else:
        what = " and ".join(missing)
        yield Check(
            WARN,
            f"{branch} does not require {what}: anyone can merge a change the loop's checks did not pass"
            + (", and GitHub holds no auto-merge on a PR nothing gates" if not contexts else "")
            + f" — add a ruleset (or classic protection) on {branch} requiring {DIFF_GATE}",
        )


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
    """The arms GitHub refuses every time: a PR whose required statuses are all set before it opens is clean then."""
    from evolution.loop.freeze import REPLAY, check_mode

    checked = check_mode(entity) == REPLAY
    # Set before an apply PR opens: the diff gate, and the validation too when no check runs ("no pre-merge check").
    set_at_open = frozenset({DIFF_GATE}) if checked else OURS
    if contexts and contexts <= set_at_open:
        what = " and ".join(c for c in (DIFF_GATE, VALIDATION) if c in contexts)
        why = "" if checked else f" (it has no pre-merge check, so {VALIDATION} answers success at once)"
        yield Check(
            WARN,
            f"{_label(entity)} declares merge: auto, and {branch} requires nothing but {what}, set before its PRs "
            f'open{why}: every PR is clean the moment it opens, so GitHub refuses every arm ("Pull request is in '
            f'clean status") and each round demotes to a person — require another check (your CI) on {branch}',
        )
        if checked or contexts != OURS:
            return
    if contexts and not contexts - OURS:
        yield Check(
            WARN,
            f"{_label(entity)}: its revert PRs carry {DIFF_GATE} and {VALIDATION} as success from the moment they "
            f"open and {branch} requires nothing else, so GitHub refuses their arms too: a person merges each revert",
        )


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
