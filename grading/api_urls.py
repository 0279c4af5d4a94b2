"""Routes of the grading REST API, mounted at ``/api/`` beside singularity's (names prefixed ``api-grading-``)."""

from django.urls import path

from grading import api, api_runs
from grading.chat import api as chat_api

urlpatterns = [
    path("entities/", api.EntityList.as_view(), name="api-grading-entities"),
    path("entities/<str:target_kind>/<str:slug>/", api.EntityDetail.as_view(), name="api-grading-entity"),
    path(
        "entities/<str:target_kind>/<str:slug>/calibration/",
        api.EntityCalibration.as_view(),
        name="api-grading-calibration",
    ),
    path("runs/", api.RunList.as_view(), name="api-grading-runs"),
    path("runs/report/", api_runs.report_runs, name="api-grading-runs-report"),
    path("runs/<uuid:run_id>/", api.RunDetail.as_view(), name="api-grading-run"),
    path("runs/<uuid:run_id>/report/", api.RunReport.as_view(), name="api-grading-run-report"),
    path("runs/<uuid:run_id>/grade/", api.RunGrade.as_view(), name="api-grading-run-grade"),
    path("grades/", api.GradeList.as_view(), name="api-grading-grades"),
    path("ratings/", api.Ratings.as_view(), name="api-grading-ratings"),
    path("episodes/", chat_api.EpisodeList.as_view(), name="api-grading-episodes"),
    path("episodes/<uuid:run_id>/", chat_api.EpisodeDetail.as_view(), name="api-grading-episode"),
    path("episodes/<uuid:run_id>/close/", chat_api.EpisodeClose.as_view(), name="api-grading-episode-close"),
]
