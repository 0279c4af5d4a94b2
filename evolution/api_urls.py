"""Routes of the loop's REST API, mounted at ``/api/`` (names prefixed ``api-loop-``)."""

urlpatterns: list = []

# --- loop_status, loop_history, loop_get_cycle, loop_analyze (evolution.api) ---
from django.urls import path  # noqa: E402

from evolution import api  # noqa: E402

urlpatterns += [
    path("loop/status/", api.LoopStatus.as_view(), name="api-loop-status"),
    path("loop/history/", api.LoopHistory.as_view(), name="api-loop-history"),
    path("loop/cycles/<int:pk>/", api.LoopCycle.as_view(), name="api-loop-cycle"),
    path("loop/analyze/", api.LoopAnalyze.as_view(), name="api-loop-analyze"),
]
