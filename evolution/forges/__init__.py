"""Where the loop's pull requests live: the local forge (embedded default) or GitHub.

``get_forge()`` returns the configured one. Everything else in the loop talks
to the ``Forge`` interface only. ``git_env()`` is what every git command adds
to its environment for the configured forge (GitHub: the HTTPS credential).
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from evolution.forges.base import Forge, ForgeError, PullInfo

__all__ = ["Forge", "ForgeError", "PullInfo", "get_forge", "git_env", "rate_limit"]


def get_forge() -> Forge:
    """The forge the brain is hosted on (settings.LOOP_FORGE: "local", the default, or "github")."""
    from django.conf import settings

    name = getattr(settings, "LOOP_FORGE", "local")
    if name == "local":
        from evolution.forges.local import LocalForge

        return LocalForge()
    if name == "github":
        from evolution.forges.github import GitHubForge

        return GitHubForge()
    from singularity.errors import ConfigError

    raise ConfigError(f"LOOP_FORGE: {name!r} is not a forge this build has (local, github)")


def git_env() -> dict[str, str]:
    """Environment for a git command under the configured forge: {} for the local forge, GitHub's credential header."""
    from django.conf import settings

    if getattr(settings, "LOOP_FORGE", "local") != "github":
        return {}
    from evolution.forges.github import git_env as github_git_env

    return github_git_env()


def rate_limit() -> tuple[datetime, str] | None:
    """GitHub's rate limit standing now — (until, GitHub's words) — or None (the local forge has none).

    Read from the database (``GitHubRateLimit``), so every process waits out a limit any one of them met.
    """
    from django.conf import settings

    if getattr(settings, "LOOP_FORGE", "local") != "github":
        return None
    from evolution.models import GitHubRateLimit

    row = GitHubRateLimit.objects.filter(until__gt=timezone.now()).order_by("-until").first()
    return None if row is None else (row.until, row.reason)


def rate_limit_words(until: datetime) -> str:
    """ "GitHub rate limit until 14:05 UTC" — how every page and notice says it."""
    from evolution.forges.github import clock

    return f"GitHub rate limit until {clock(until)}"
