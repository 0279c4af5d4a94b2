"""Where the loop's pull requests live: the local forge (embedded default) or GitHub.

``get_forge()`` returns the configured one. Everything else in the loop talks
to the ``Forge`` interface only.
"""

from __future__ import annotations

from evolution.forges.base import Forge, ForgeError, PullInfo

__all__ = ["Forge", "ForgeError", "PullInfo", "get_forge"]


def get_forge() -> Forge:
    """The forge the brain is hosted on (settings.LOOP_FORGE: "local", the default, or "github")."""
    from django.conf import settings

    name = getattr(settings, "LOOP_FORGE", "local")
    if name == "local":
        from evolution.forges.local import LocalForge

        return LocalForge()
    from singularity.errors import ConfigError

    raise ConfigError(f"LOOP_FORGE: {name!r} is not a forge this build has (local)")
