"""The loop's pages, mounted at ``/evolution/`` ahead of grading's."""

from django.urls import path

app_name = "evolution"

urlpatterns: list = []

# --- The local forge's pull requests (evolution.views_pulls) ---
from evolution.views import pulls as views_pulls  # noqa: E402

urlpatterns += [
    path("pulls/", views_pulls.pull_list, name="pulls"),
    path("pulls/<int:number>/", views_pulls.pull_detail, name="pull"),
    path("pulls/<int:number>/merge/", views_pulls.pull_merge, name="pull-merge"),
    path("pulls/<int:number>/close/", views_pulls.pull_close, name="pull-close"),
    path("pulls/<int:number>/check/", views_pulls.pull_check, name="pull-check"),
]

# --- The fleet, an entity's cycles and lessons, a cycle's story (evolution.views) ---
from evolution.views import pages as views  # noqa: E402

urlpatterns += [
    path("", views.fleet, name="fleet"),
    path("entities/<str:target_kind>/<str:slug>/cycles/", views.entity_cycles, name="entity-cycles"),
    path("entities/<str:target_kind>/<str:slug>/analyze/", views.entity_analyze, name="entity-analyze"),
    path("cycles/<int:pk>/", views.cycle_story, name="cycle"),
    path("go/cycle:<int:pk>/", views.go_cycle, name="go-cycle"),
]

# --- An entity's Supervision section: hold, release, re-arm, dismiss (evolution.views_supervision) ---
from evolution.views import supervision as views_supervision  # noqa: E402

urlpatterns += [
    path(
        "entities/<str:target_kind>/<str:slug>/supervision/",
        views_supervision.entity_supervision,
        name="entity-supervision",
    ),
    path("entities/<str:target_kind>/<str:slug>/supervision/hold/", views_supervision.entity_hold, name="entity-hold"),
    path(
        "entities/<str:target_kind>/<str:slug>/supervision/release/",
        views_supervision.entity_release,
        name="entity-release",
    ),
    path(
        "entities/<str:target_kind>/<str:slug>/supervision/rearm/", views_supervision.entity_rearm, name="entity-rearm"
    ),
    path(
        "entities/<str:target_kind>/<str:slug>/supervision/dismiss/",
        views_supervision.entity_dismiss,
        name="entity-dismiss",
    ),
]

# --- An entity's Ideas: post, queue, withdraw (evolution.views_ideas) ---
from evolution.views import ideas as views_ideas  # noqa: E402

urlpatterns += [
    path("entities/<str:target_kind>/<str:slug>/ideas/", views_ideas.entity_ideas, name="entity-ideas"),
    path("entities/<str:target_kind>/<str:slug>/ideas/post/", views_ideas.idea_post, name="entity-idea-post"),
    path("ideas/<int:pk>/withdraw/", views_ideas.idea_withdraw, name="idea-withdraw"),
]

# --- Settings → Policy defaults and an entity's Policy view (evolution.views_settings) ---
from evolution.views import settings as views_settings  # noqa: E402

urlpatterns += [
    path("settings/", views_settings.settings_page, name="settings"),
    path("settings/preview/", views_settings.preview, name="settings-preview"),
    path("settings/save/", views_settings.save, name="settings-save"),
    path("settings/join/", views_settings.join, name="settings-join"),
    path("entities/<str:target_kind>/<str:slug>/policy/", views_settings.entity_policy, name="entity-policy"),
]

# --- The Policy view's Backtest panel (evolution.views.backtest) ---
from evolution.views import backtest as views_backtest  # noqa: E402

urlpatterns += [
    path("entities/<str:target_kind>/<str:slug>/backtest/", views_backtest.entity_backtest, name="entity-backtest"),
]

# --- What needs a person: the page and the navigation's count (evolution.views_needs_you) ---
from evolution.views import needs_you as views_needs_you  # noqa: E402

urlpatterns += [
    path("needs-you/", views_needs_you.needs_you_page, name="needs-you"),
    path("needs-you/count/", views_needs_you.needs_you_count, name="needs-you-count"),
]

# --- The Policy view's A/A panel (evolution.views.aa, issue 31) ---
from evolution.views import aa as views_aa  # noqa: E402

urlpatterns += [
    path("entities/<str:target_kind>/<str:slug>/aa/", views_aa.entity_aa, name="entity-aa"),
]
