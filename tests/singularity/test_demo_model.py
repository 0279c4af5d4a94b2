"""The demo model's classifier skill, asked through the real gateway client."""

from __future__ import annotations

import json

import pytest

from singularity.demo_model import classify, demo_policy, estimate_prompt_tokens, parse_rules
from singularity.gateway import Gateway
from tests.fakes.gateway import FakeGateway

INSTRUCTIONS = """You sort support tickets. Answer with one label.

## Rules

- refund, charged twice, invoice -> billing
- crash, error, bug -> technical
- otherwise -> general

## Notes

- ignored, not a rule -> nothing
"""

READ_TOOL = {
    "type": "function",
    "function": {
        "name": "self__read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}


@pytest.fixture
def demo(fake_gateway: FakeGateway) -> Gateway:
    fake_gateway.handler = demo_policy
    return fake_gateway.gateway()


def ask(gw: Gateway, user: str, system: str = INSTRUCTIONS, tools: list[dict] | None = None) -> str | None:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return gw.complete(model="demo-model", messages=messages, tools=tools or []).content


@pytest.mark.parametrize(
    ("ticket", "label"),
    [
        ("Where is the invoice for March?", "billing"),
        ("I was CHARGED  TWICE this month", "billing"),
        ("The app shows an Error on start.", "technical"),
        ("found a bug in the export", "technical"),
        ("What are your opening hours?", "general"),
    ],
)
def test_it_answers_the_label_of_the_first_matching_rule(demo: Gateway, ticket: str, label: str) -> None:
    assert ask(demo, ticket) == label


def test_the_first_rule_wins_when_two_match(demo: Gateway) -> None:
    assert ask(demo, "The refund page shows an error") == "billing"


def test_keywords_match_whole_words_only(demo: Gateway) -> None:
    # "crashes" is not "crash" and "debugging" is not "bug": the rules must name them to catch them.
    assert ask(demo, "The app crashes while debugging") == "general"
    assert ask(demo, "Refunds are slow") == "general"


def test_it_accepts_the_unicode_arrow(demo: Gateway) -> None:
    system = "## Rules\n\n- login, password → account\n- otherwise → other\n"
    assert ask(demo, "I forgot my password", system=system) == "account"
    assert ask(demo, "hello", system=system) == "other"


def test_it_reads_a_json_input_without_its_underscore_labels(demo: Gateway) -> None:
    ticket = json.dumps({"text": "My invoice is wrong", "_expected": "technical error bug"})
    assert ask(demo, ticket) == "billing"
    unlabelled = json.dumps({"text": "Hello there", "_expected": "crash"})
    assert ask(demo, unlabelled) == "general"


def test_it_reads_only_the_object_after_a_lead_in(demo: Gateway) -> None:
    # The lead-in's words are not the ticket: a rule on "input" must not fire on every run.
    system = "## Rules\n\n- input -> wrong\n- otherwise -> general\n"
    ticket = "Input:\n" + json.dumps({"text": "Hello"}, indent=2)
    assert ask(demo, ticket, system=system) == "general"
    assert ask(demo, "Input:\n" + json.dumps({"text": "My invoice"}, indent=2)) == "billing"


def test_it_labels_instead_of_calling_a_tool_when_the_user_spoke_last(demo: Gateway, fake_gateway: FakeGateway) -> None:
    messages = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": "It will crash"}]
    result = demo.complete(model="demo-model", messages=messages, tools=[READ_TOOL])
    assert result.tool_calls == []
    assert result.content == "technical"
    assert fake_gateway.requests[0].json["tools"]


def test_without_a_rules_section_it_behaves_as_before(demo: Gateway) -> None:
    messages = [{"role": "system", "content": "Be helpful."}, {"role": "user", "content": "It will crash"}]
    result = demo.complete(model="demo-model", messages=messages, tools=[READ_TOOL])
    assert [call.name for call in result.tool_calls] == ["self__read_file"]


def test_rules_without_an_otherwise_line_are_not_a_classifier() -> None:
    assert parse_rules("## Rules\n\n- crash -> technical\n") is None
    assert parse_rules("no rules here") is None


def test_usage_is_counted_from_the_text_as_for_every_reply(demo: Gateway) -> None:
    messages = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": "invoice please"}]
    result = demo.complete(model="demo-model", messages=messages, tools=[])
    assert result.usage.prompt_tokens == estimate_prompt_tokens(messages)
    assert result.usage.completion_tokens == (len("billing") + 3) // 4
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens


def test_the_classifier_is_deterministic() -> None:
    rules = parse_rules(INSTRUCTIONS)
    assert rules is not None
    assert rules.otherwise == "general"
    assert [label for _, label in rules.rules] == ["billing", "technical"]
    assert {classify(rules, "an error, then a refund") for _ in range(5)} == {"billing"}
