"""Routes of the loop's REST API, mounted at ``/api/`` (names prefixed ``api-loop-``)."""

urlpatterns: list = []

# --- loop_status, loop_history, loop_get_cycle, loop_analyze (evolution.api) ---
from django.urls import path  # noqa: E402

from evolution.api import loop as api  # noqa: E402

urlpatterns += [
    path("loop/status/", api.LoopStatus.as_view(), name="api-loop-status"),
    path("loop/history/", api.LoopHistory.as_view(), name="api-loop-history"),
    path("loop/get/", api.LoopGet.as_view(), name="api-loop-get"),
    path("loop/cycles/<int:pk>/", api.LoopCycle.as_view(), name="api-loop-cycle"),
    path("loop/analyze/", api.LoopAnalyze.as_view(), name="api-loop-analyze"),
]

# --- loop_create_idea, loop_list_ideas, loop_cancel_idea (evolution.api_ideas) ---
from evolution.api import ideas as api_ideas  # noqa: E402

urlpatterns += [
    path("loop/ideas/", api_ideas.LoopIdeas.as_view(), name="api-loop-ideas"),
    path("loop/ideas/<int:pk>/withdraw/", api_ideas.LoopIdeaWithdraw.as_view(), name="api-loop-idea-withdraw"),
]

# --- loop_hold, loop_release, loop_rearm, loop_ack_failure, the supervision rows (evolution.api_supervision) ---
from evolution.api import supervision as api_supervision  # noqa: E402

urlpatterns += [
    path("loop/hold/", api_supervision.LoopHold.as_view(), name="api-loop-hold"),
    path("loop/release/", api_supervision.LoopRelease.as_view(), name="api-loop-release"),
    path("loop/rearm/", api_supervision.LoopRearm.as_view(), name="api-loop-rearm"),
    path("loop/dismiss/", api_supervision.LoopDismiss.as_view(), name="api-loop-dismiss"),
    path("loop/supervision/", api_supervision.LoopSupervision.as_view(), name="api-loop-supervision"),
]

# --- loop_join, loop_set, loop_widen (evolution.api_settings) ---
from evolution.api import settings as api_settings  # noqa: E402

urlpatterns += [
    path("loop/join/", api_settings.LoopJoin.as_view(), name="api-loop-join"),
    path("loop/set/", api_settings.LoopSet.as_view(), name="api-loop-set"),
    path("loop/widen/", api_settings.LoopWiden.as_view(), name="api-loop-widen"),
]

# --- the forge's pull requests for scripts: list, read, merge, close (evolution.api.forge) ---
from evolution.api import forge as api_forge  # noqa: E402

urlpatterns += [
    path("forge/pulls/", api_forge.ForgePulls.as_view(), name="api-forge-pulls"),
    path("forge/pulls/<int:number>/", api_forge.ForgePull.as_view(), name="api-forge-pull"),
    path("forge/pulls/<int:number>/merge/", api_forge.ForgeMerge.as_view(), name="api-forge-merge"),
    path("forge/pulls/<int:number>/close/", api_forge.ForgeClose.as_view(), name="api-forge-close"),
]

# --- loop_summary: a window's settles by grade and what the loop spent (evolution.api.summary, issue 16) ---
from evolution.api import summary as api_summary  # noqa: E402

urlpatterns += [path("loop/summary/", api_summary.LoopSummary.as_view(), name="api-loop-summary")]

# --- loop_backtest: a policy replayed over the entity's graded history (evolution.api.backtest) ---
from evolution.api import backtest as api_backtest  # noqa: E402

urlpatterns += [
    path("loop/backtest/", api_backtest.LoopBacktest.as_view(), name="api-loop-backtest"),
]

# --- eval_*_method and instruction_* (what the judge and the loop read; evolution.api.prompts, issue 29) ---
from evolution.api import prompts as api_prompts  # noqa: E402

urlpatterns += [
    path("eval/methods/", api_prompts.EvalMethods.as_view(), name="api-eval-methods"),
    path("eval/methods/<str:name>/", api_prompts.EvalMethod.as_view(), name="api-eval-method"),
    path("loop/instructions/", api_prompts.Instructions.as_view(), name="api-loop-instructions"),
    path("loop/instructions/get/", api_prompts.InstructionGet.as_view(), name="api-loop-instruction-get"),
    path("loop/instructions/write/", api_prompts.InstructionWrite.as_view(), name="api-loop-instruction-write"),
    path("loop/instructions/reset/", api_prompts.InstructionReset.as_view(), name="api-loop-instruction-reset"),
]

# --- loop_aa: A/A calibration of the check and the watch (evolution.api.aa, issue 31) ---
from evolution.api import aa as api_aa  # noqa: E402

urlpatterns += [
    path("loop/aa/", api_aa.LoopAa.as_view(), name="api-loop-aa"),
    path("loop/aa/<int:pk>/", api_aa.LoopAaReport.as_view(), name="api-loop-aa-report"),
]

from evolution.api import check_pr as api_check_pr  # noqa: E402 - issue 35, kept apart from the others' lines

urlpatterns += [path("loop/check-pr/", api_check_pr.LoopCheckPr.as_view(), name="api-loop-check-pr")]
