"""A server process freezes what it keeps for its lifetime out of the collector's full passes (issue 18)."""

from __future__ import annotations

import gc
import importlib
import sys

import pytest

pytestmark = pytest.mark.django_db


def test_the_wsgi_application_freezes_what_it_loaded_at_start():
    gc.unfreeze()
    sys.modules.pop("singularity.wsgi", None)
    try:
        wsgi = importlib.import_module("singularity.wsgi")
        assert callable(wsgi.application)
        assert gc.get_freeze_count() > 10_000  # the apps, the URLconf's views, their modules
        assert gc.isenabled()  # what is made later is collected as before
    finally:
        gc.unfreeze()
