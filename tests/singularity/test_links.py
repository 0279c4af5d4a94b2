"""A page's address reversed once (``singularity.links.path``) is what ``reverse`` answers, under the script
prefix and the URLconf in force when it is asked."""

import uuid

import pytest
from django.test import override_settings
from django.urls import clear_script_prefix, reverse, set_script_prefix
from django.urls import path as route

from singularity import links


def test_the_address_is_reverses_for_ids_uuids_and_slugs():
    card = uuid.uuid4()
    assert links.path("hitl-card", card) == reverse("hitl-card", args=[card])
    assert links.path("evolution:cycle", 7) == reverse("evolution:cycle", args=[7]) == "/evolution/cycles/7/"
    assert links.path("grading:entity", "scenario", "a b·ç") == reverse("grading:entity", args=["scenario", "a b·ç"])
    assert links.path("evolution:cycle", 7) is links.path("evolution:cycle", 7), "remembered"


def test_a_bad_argument_is_refused_as_reverse_refuses_it():
    from django.urls import NoReverseMatch

    with pytest.raises(NoReverseMatch):
        links.path("grading:entity", "scenario", "a/b")


def test_the_script_prefix_in_force_is_part_of_the_address():
    before = links.path("evolution:cycle", 8)
    set_script_prefix("/under/")
    try:
        assert links.path("evolution:cycle", 8) == "/under/evolution/cycles/8/" == reverse("evolution:cycle", args=[8])
    finally:
        clear_script_prefix()
    assert links.path("evolution:cycle", 8) == before


def _other(request):  # pragma: no cover - never requested
    raise AssertionError


urlpatterns = [route("elsewhere/cycle/<int:pk>/", _other, name="cycle-elsewhere")]


def test_a_changed_urlconf_is_not_answered_from_memory():
    assert links.path("evolution:cycle", 9) == "/evolution/cycles/9/"
    with override_settings(ROOT_URLCONF=__name__):
        assert links.path("cycle-elsewhere", 9) == "/elsewhere/cycle/9/"
        with pytest.raises(Exception, match="not a registered namespace|Reverse for"):
            links.path("evolution:cycle", 9)
    assert links.path("evolution:cycle", 9) == "/evolution/cycles/9/"
