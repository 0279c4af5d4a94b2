"""The LLM judge through a real loopback gateway: structured verdicts, refusals of bad answers, scales, quality."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from grading.booking import on_terminal
from grading.grade import grade_now
from grading.judge import NO_STRUCTURED_OUTPUT, UNPARSEABLE_OUTPUT
from grading.models import Grade
from tests.fakes.gateway import Reply
from tests.grading.grading_helpers import judge_reply, make_entity, make_run

pytestmark = pytest.mark.django_db

REQUIREMENT = "The report names every blocked task"


@pytest.fixture
def judge(fake_gateway, settings):
    """The fake gateway, configured as the engine's gateway, with prices so a judging costs something."""
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_MAX_RETRIES = 0
    settings.BRAMA_MODEL = "engine-model"
    settings.BRAMA_INPUT_PRICE_USD_PER_MILLION = Decimal("2")
    settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION = Decimal("10")
    settings.SINGULARITY_INSTANCE_USD_PER_HOUR = Decimal("0")
    return fake_gateway


def graded(entity, **run_fields) -> Grade:
    run = make_run(entity, **run_fields)
    return grade_now(on_terminal(run))


def test_a_structured_answer_lands_as_score_verdicts_and_category(judge):
    entity = make_entity(evaluation={"requirements": [REQUIREMENT]}, kind="pipeline")
    judge.script(judge_reply(score=0.3, passed=False, category="missing requirement"))
    grade = graded(entity)
    assert grade.status == Grade.Status.GRADED
    assert grade.score == pytest.approx(0.3)
    assert grade.passed is False
    assert grade.failure_category == "missing requirement"
    assert grade.criteria[0]["criterion"] == REQUIREMENT and grade.criteria[0]["passed"] is False
    assert grade.feedback == "Keep the list at the top."
    assert grade.metrics["quality"] == pytest.approx(0.3)
    assert grade.metrics["cost_usd"] == "0.0123"
    assert grade.metrics["duration_ms"] == 1200 and grade.metrics["tool_failures"] == 0
    assert grade.error == ""


def test_a_passing_run_has_no_failure_category(judge):
    entity = make_entity(kind="pipeline")
    judge.script(judge_reply(score=0.9, passed=True, category="should be ignored"))
    grade = graded(entity)
    assert grade.passed is True and grade.failure_category == ""


def test_the_judging_costs_what_the_gateway_counted_at_the_engine_prices(judge):
    judge.script(judge_reply())
    grade = graded(make_entity(kind="pipeline"))
    # 1,000 prompt tokens at $2/M and 200 completion tokens at $10/M.
    assert grade.cost_usd == Decimal("0.004")


def test_the_judge_is_asked_with_the_role_the_method_the_definition_and_the_run(judge):
    entity = make_entity(
        kind="pipeline",
        evaluation={
            "requirements": [REQUIREMENT],
            "metrics": {
                "relevance": {
                    "kind": "judged",
                    "direction": "max",
                    "role": "guard",
                    "criterion": "Every item ties to an event from the last 24 hours",
                }
            },
        },
        body="List every blocked task first.",
    )
    judge.script(judge_reply(metrics={"relevance": 0.7}))
    graded(
        entity,
        input={"board": "ops"},
        output={"report": "Blocked: #12"},
        trace=[{"tool": "jira__search", "status": "ok"}],
    )
    request = judge.requests[0].json
    system, user = request["messages"][0]["content"], request["messages"][1]["content"]
    assert "You are the evaluator" in system  # the engine's evaluator role
    assert "# Run Evaluation" in system  # the engine's default method
    assert "List every blocked task first." in user
    assert REQUIREMENT in user
    assert "relevance: Every item ties to an event from the last 24 hours" in user
    assert '"board": "ops"' in user and '"report": "Blocked: #12"' in user
    assert "jira__search: ok" in user
    assert request["model"] == "engine-model"
    schema = request["response_format"]["json_schema"]["schema"]
    assert request["response_format"]["type"] == "json_schema"
    assert schema["properties"]["metrics"]["required"] == ["relevance"]
    assert set(schema["required"]) == {
        "criteria",
        "overall_score",
        "passed",
        "failure_category",
        "feedback",
        "metrics",
        "tasks",
    }


def test_the_judge_dispatches_under_the_declared_model_ref(judge):
    entity = make_entity(kind="pipeline", evaluation={"modelRef": "openai:gpt-5.2"})
    judge.script(judge_reply())
    grade = graded(entity)
    assert judge.requests[0].json["model"] == "openai:gpt-5.2"
    assert grade.judge["model"] == "openai:gpt-5.2"


def test_prose_instead_of_structured_output_fails_the_grade_never_a_zero(judge):
    judge.script(Reply(content="The run looks fine to me, 8/10."))
    grade = graded(make_entity(kind="pipeline"))
    assert grade.status == Grade.Status.FAILED
    assert grade.error == NO_STRUCTURED_OUTPUT == "judge: no structured output"
    assert grade.score is None and grade.passed is None and grade.metrics == {}
    assert grade.cost_usd > 0  # the call was made and paid for


@pytest.mark.parametrize(
    "content",
    [
        json.dumps({"score": 0.9}),
        json.dumps({**json.loads(judge_reply().content), "overall_score": 1.7}),
        json.dumps({**json.loads(judge_reply().content), "passed": "yes"}),
        json.dumps([1, 2, 3]),
        '{"criteria": [',
    ],
    ids=["other-shape", "score-off-unit", "passed-not-bool", "a-list", "truncated"],
)
def test_json_of_another_shape_fails_the_grade_as_unparseable(judge, content):
    judge.script(Reply(content=content))
    grade = graded(make_entity(kind="pipeline"))
    assert grade.status == Grade.Status.FAILED
    assert grade.error == UNPARSEABLE_OUTPUT == "judge: unparseable output"
    assert grade.score is None


def test_a_gateway_error_fails_the_grade_and_no_other_model_is_tried(judge):
    entity = make_entity(kind="pipeline", evaluation={"modelRef": "openai:gpt-5.2"})
    judge.script(Reply(status=400, error_message="model not found"))
    grade = graded(entity)
    assert grade.status == Grade.Status.FAILED
    assert "model not found" in grade.error
    assert [request.json["model"] for request in judge.requests] == ["openai:gpt-5.2"]
    assert grade.judge["model"] == "openai:gpt-5.2"


def test_a_declared_judged_metric_the_judge_did_not_answer_fails_naming_it(judge):
    entity = make_entity(
        kind="pipeline",
        evaluation={
            "metrics": {"relevance": {"kind": "judged", "direction": "max", "role": "guard", "criterion": "On topic"}}
        },
    )
    judge.script(judge_reply(metrics={}))
    grade = graded(entity)
    assert grade.status == Grade.Status.FAILED
    assert "relevance" in grade.error
    assert grade.metrics == {}


HUMAN_FIT = {
    "kind": "judged",
    "human": True,
    "direction": "max",
    "role": "guard",
    "criterion": "The scenes follow the strategy",
}


def test_a_scaled_answer_is_normalized_three_of_five_is_a_half(judge):
    entity = make_entity(kind="pipeline", evaluation={"metrics": {"layout_fit": HUMAN_FIT}})
    judge.script(judge_reply(metrics={"layout_fit": 3}))
    grade = graded(entity)
    assert grade.status == Grade.Status.GRADED
    assert grade.metrics["layout_fit"] == 0.5
    assert "from 1 to 5 in steps of 1" in judge.requests[0].json["messages"][1]["content"]
    assert "3 = Acceptable" in judge.requests[0].json["messages"][1]["content"]


@pytest.mark.parametrize(("value", "why"), [(6, "off its scale"), (0, "off its scale"), (3.5, "between the steps")])
def test_an_answer_off_the_scale_or_between_steps_fails_naming_the_metric(judge, value, why):
    entity = make_entity(kind="pipeline", evaluation={"metrics": {"layout_fit": HUMAN_FIT}})
    judge.script(judge_reply(metrics={"layout_fit": value}))
    grade = graded(entity)
    assert grade.status == Grade.Status.FAILED
    assert "layout_fit" in grade.error and why in grade.error


def test_a_judge_only_metric_without_scale_is_answered_on_zero_to_one(judge):
    spec = {"kind": "judged", "direction": "max", "role": "guard", "criterion": "On topic"}
    entity = make_entity(kind="pipeline", evaluation={"metrics": {"relevance": spec}})
    judge.script(judge_reply(metrics={"relevance": 0.25}), judge_reply(metrics={"relevance": 2}))
    assert graded(entity).metrics["relevance"] == 0.25
    failed = graded(entity)
    assert failed.status == Grade.Status.FAILED and "relevance" in failed.error


TASKS = [{"id": "gather", "prompt": "Gather the tickets"}, {"id": "write", "prompt": "Write the report"}]


def test_workflow_quality_weighs_tasks_sixty_and_the_run_forty_by_default(judge):
    entity = make_entity(kind="workflow", tasks=TASKS)
    judge.script(judge_reply(score=0.0, tasks=[{"id": "gather", "score": 1.0}, {"id": "write", "score": 1.0}]))
    grade = graded(entity)
    assert grade.metrics["quality"] == pytest.approx(0.6)
    assert grade.score == pytest.approx(0.6)
    assert "gather: Gather the tickets" in judge.requests[0].json["messages"][1]["content"]


@pytest.mark.parametrize("weights", [{"tasks": 1, "run": 3}, {"tasks": 0.25, "run": 0.75}])
def test_custom_score_weights_are_relative(judge, weights):
    entity = make_entity(kind="workflow", tasks=TASKS, evaluation={"scoreWeights": weights})
    judge.script(judge_reply(score=0.0, tasks=[{"id": "gather", "score": 1.0}, {"id": "write", "score": 1.0}]))
    assert graded(entity).metrics["quality"] == pytest.approx(0.25)


def test_a_pipeline_quality_is_the_run_score_alone(judge):
    entity = make_entity(kind="pipeline", tasks=TASKS)
    judge.script(judge_reply(score=0.4, tasks=[{"id": "gather", "score": 1.0}]))
    assert graded(entity).metrics["quality"] == pytest.approx(0.4)


def test_a_heartbeat_quality_is_the_run_score_alone(judge):
    entity = make_entity(kind="heartbeat", schedule="0 * * * *", evaluation={"sample": {"maxPerDay": 5}})
    judge.script(judge_reply(score=0.7, tasks=[{"id": "x", "score": 0.0}]))
    assert graded(entity).metrics["quality"] == pytest.approx(0.7)


def test_a_workflow_task_the_judge_did_not_score_fails_naming_it(judge):
    entity = make_entity(kind="workflow", tasks=TASKS)
    judge.script(judge_reply(tasks=[{"id": "gather", "score": 1.0}]))
    grade = graded(entity)
    assert grade.status == Grade.Status.FAILED and "write" in grade.error
