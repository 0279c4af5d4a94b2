"""Addresses of pages by their route's name, reversed once each.

``django.urls.reverse`` matches a route's patterns and quotes its arguments on every call: some 40 µs on this
machine, and one page of the fleet links some 180 cards, cycles and entities, the same ones on every refresh.
``path`` answers what ``reverse`` answers and remembers it, keyed by everything ``reverse`` reads besides its
arguments — the URLconf in force and the script prefix — and forgets when the URLconf setting changes.
"""

from __future__ import annotations

import functools
from typing import Any

from django.core.signals import setting_changed
from django.urls import get_script_prefix, get_urlconf, reverse

#: Addresses remembered at most (a few hundred bytes each): more than a busy dashboard links.
REMEMBERED = 16384


@functools.lru_cache(maxsize=REMEMBERED)
def _reversed(urlconf: Any, prefix: str, name: str, args: tuple[Any, ...]) -> str:
    return reverse(name, urlconf=urlconf, args=args)  # the prefix is in the key only: reverse reads it itself


def path(name: str, *args: Any) -> str:
    """``reverse(name, args=args)``, remembered (``args`` hashable: ids, UUIDs, slugs)."""
    return _reversed(get_urlconf(), get_script_prefix(), name, args)


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting == "ROOT_URLCONF":
        _reversed.cache_clear()


setting_changed.connect(_forget, dispatch_uid="singularity.links")
