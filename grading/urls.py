"""The grading pages, mounted at ``/evolution/``."""

from django.urls import path

from grading import views
from grading.chat import views as chat_views
from grading.views.go import go_run

app_name = "grading"

urlpatterns = [
    path("go/run:<uuid:run_id>/", go_run, name="go-run"),
    path("entities/", views.entity_list, name="entities"),
    path("entities/<str:target_kind>/<str:slug>/", views.entity_detail, name="entity"),
    path("entities/<str:target_kind>/<str:slug>/run/", views.entity_run, name="entity-run"),
    path("runs/", views.run_list, name="runs"),
    path("runs/compare/", views.run_compare, name="run-compare"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run"),
    path("runs/<uuid:run_id>/grade/", views.run_grade, name="run-grade"),
    path("rate/", views.rate_runs, name="rate"),
    path("rate/skip/", views.rate_skip, name="rate-skip"),
    path("chat/<str:slug>/", chat_views.chat, name="chat"),
    path("chat/<str:slug>/close/", chat_views.chat_close, name="chat-close"),
    path("chat/episodes/<uuid:run_id>/", chat_views.episode_detail, name="episode"),
]
