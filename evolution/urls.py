"""The loop's pages, mounted at ``/evolution/`` ahead of grading's."""

from django.urls import path

app_name = "evolution"

urlpatterns: list = []

# --- The local forge's pull requests (evolution.views_pulls) ---
from evolution import views_pulls  # noqa: E402

urlpatterns += [
    path("pulls/", views_pulls.pull_list, name="pulls"),
    path("pulls/<int:number>/", views_pulls.pull_detail, name="pull"),
    path("pulls/<int:number>/merge/", views_pulls.pull_merge, name="pull-merge"),
    path("pulls/<int:number>/close/", views_pulls.pull_close, name="pull-close"),
]

# --- The fleet, an entity's cycles and lessons, a cycle's story (evolution.views) ---
from evolution import views  # noqa: E402

urlpatterns += [
    path("", views.fleet, name="fleet"),
    path("entities/<str:target_kind>/<str:slug>/cycles/", views.entity_cycles, name="entity-cycles"),
    path("entities/<str:target_kind>/<str:slug>/analyze/", views.entity_analyze, name="entity-analyze"),
    path("cycles/<int:pk>/", views.cycle_story, name="cycle"),
    path("go/cycle:<int:pk>/", views.go_cycle, name="go-cycle"),
]
