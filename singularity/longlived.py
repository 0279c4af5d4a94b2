"""Keep the objects a server process loads at start out of the garbage collector's full passes (issue 18).

A web process holds some 300,000 objects from the moment it has loaded the apps and the URLconf until it
exits (modules, classes, functions, the URL patterns, the templates' nodes). Python's cyclic collector walks
every object of its oldest generation on each full pass, and a request that builds a page of model rows
triggers one now and then: about 150 ms added to the fleet page's p95 at a thousand entities (p50 143 ms,
p95 318 ms; 181 ms once frozen). ``freeze`` moves everything allocated so far into the permanent
generation, which no pass walks; objects made later are collected as before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def freeze() -> None:
    """Load the URLconf (the views and their modules), collect once, then freeze what is left."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imported now, so it is frozen with the rest
    gc.collect()
    gc.freeze()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector for a batch whose objects all live until it ends, then restore it.

    A batch of a thousand runs holds some hundred thousand dicts and lists
    until it is written: every young pass walks them again, promotes them and
    ends in a full pass, about a quarter of the CPU of the OTLP sweep's batch
    (issue 30). Refcounting frees the batch when it ends; the cycles it made
    wait for the next pass. Left as it was when the collector was off already.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
