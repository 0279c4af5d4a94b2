"""The Brama client, driven through the real openai SDK against a loopback server."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from pathlib import Path

import httpx
import pytest
from pytest_django.fixtures import Settings

from singularity.demo_model import ChatCompletionsServer, Reply, demo_policy
from singularity.gateway import Completion, Gateway, GatewayError, ToolCall, Usage, get_gateway, is_demo, sign
from tests.fakes.gateway import FakeGateway

HELLO = [{"role": "user", "content": "hello"}]
REMEMBER_TOOL = {
    "type": "function",
    "function": {
        "name": "self__remember",
        "description": "Keep a memory.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "importance": {"type": "integer"}, "pin": {"type": "boolean"}},
            "required": ["text", "importance", "pin"],
        },
    },
}
READ_TOOL = {
    "type": "function",
    "function": {
        "name": "self__read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}


def complete(gw: Gateway, messages: list[dict] | None = None, tools: list[dict] | None = None) -> Completion:
    return gw.complete(model="test-model", messages=messages or HELLO, tools=tools or [])


def refusal(fake: FakeGateway, reply: Reply, **gateway_kwargs: object) -> GatewayError:
    fake.script(reply)
    with pytest.raises(GatewayError) as caught:
        complete(fake.gateway(**gateway_kwargs))
    return caught.value


def test_it_returns_content_usage_and_the_assistant_message(fake_gateway: FakeGateway) -> None:
    fake_gateway.script(
        Reply(content="hi there", usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})
    )
    result = complete(fake_gateway.gateway())
    assert result.content == "hi there"
    assert result.tool_calls == []
    assert result.usage == Usage(prompt_tokens=7, completion_tokens=3, total_tokens=10)
    assert result.model == "test-model"
    assert result.message == {"role": "assistant", "content": "hi there"}
    assert result.finish_reason == "stop"


def test_it_reads_why_the_model_stopped(fake_gateway: FakeGateway) -> None:
    fake_gateway.script(Reply(tool_calls=[("self__read_file", {"path": "a"})]))
    assert complete(fake_gateway.gateway(), tools=[READ_TOOL]).finish_reason == "tool_calls"


def test_it_sends_the_api_key_as_bearer(fake_gateway: FakeGateway) -> None:
    complete(fake_gateway.gateway(api_key="sk-secret-1"))
    assert fake_gateway.requests[0].headers["authorization"] == "Bearer sk-secret-1"


def test_it_sends_no_authorization_without_an_api_key(fake_gateway: FakeGateway) -> None:
    complete(fake_gateway.gateway(api_key=""))
    assert "authorization" not in fake_gateway.requests[0].headers


def test_it_sends_tools_only_when_there_are_some(fake_gateway: FakeGateway) -> None:
    gw = fake_gateway.gateway()
    complete(gw)
    complete(gw, tools=[READ_TOOL])
    assert "tools" not in fake_gateway.requests[0].json
    assert fake_gateway.requests[1].json["tools"] == [READ_TOOL]
    assert fake_gateway.requests[1].json["messages"] == HELLO


def test_it_signs_requests_verifiably_when_given_a_secret(fake_gateway: FakeGateway) -> None:
    complete(fake_gateway.gateway(hmac_secret=b"s3cret", agent_id="being-7"))
    request = fake_gateway.requests[0]
    headers = request.headers
    assert headers["x-agent-id"] == "being-7"
    assert headers["x-agent-timestamp"].isdigit()
    assert abs(int(headers["x-agent-timestamp"]) - time.time()) < 60
    assert headers["x-agent-signature"] == sign(b"s3cret", "being-7", headers["x-agent-timestamp"], request.body)
    assert headers["x-agent-signature"] != sign(b"other", "being-7", headers["x-agent-timestamp"], request.body)


def test_it_sends_no_agent_headers_without_a_secret(fake_gateway: FakeGateway) -> None:
    complete(fake_gateway.gateway())
    headers = fake_gateway.requests[0].headers
    assert not {"x-agent-id", "x-agent-timestamp", "x-agent-signature"} & headers.keys()


def test_sign_is_hmac_sha256_of_agent_timestamp_and_body_digest() -> None:
    # Computed independently: HMAC-SHA256(b"key", "a:1:" + sha256_hex(b"{}")).
    payload = b"a:1:" + hashlib.sha256(b"{}").hexdigest().encode()
    assert sign(b"key", "a", "1", b"{}") == hmac.new(b"key", payload, hashlib.sha256).hexdigest()


def test_it_refuses_a_usage_total_mismatch(fake_gateway: FakeGateway) -> None:
    error = refusal(
        fake_gateway, Reply(content="x", usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 16})
    )
    assert str(error) == "brama: usage total does not match prompt plus completion"
    assert error.permanent is True


def test_it_accepts_a_usage_total_of_zero(fake_gateway: FakeGateway) -> None:
    fake_gateway.script(Reply(content="x", usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 0}))
    assert complete(fake_gateway.gateway()).usage == Usage(10, 5, 0)


def test_it_refuses_a_reply_without_usage(fake_gateway: FakeGateway) -> None:
    error = refusal(fake_gateway, Reply(content="x", omit_usage=True))
    assert str(error) == "brama: unsupported response: no usage block"
    assert error.permanent is True


def test_it_refuses_negative_token_counts(fake_gateway: FakeGateway) -> None:
    error = refusal(
        fake_gateway, Reply(content="x", usage={"prompt_tokens": -1, "completion_tokens": 1, "total_tokens": 0})
    )
    assert str(error).startswith("brama: unsupported response:")
    assert error.permanent is True


def test_it_refuses_a_reply_without_choices(fake_gateway: FakeGateway) -> None:
    body = {"model": "m", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    error = refusal(fake_gateway, Reply(raw_body=json.dumps(body).encode()))
    assert str(error) == "brama: unsupported response: no choices"
    assert error.permanent is True


def test_it_refuses_a_tool_call_that_is_not_a_function(fake_gateway: FakeGateway) -> None:
    call = {"id": "c1", "type": "retrieval", "function": {"name": "x", "arguments": "{}"}}
    body = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    error = refusal(fake_gateway, Reply(raw_body=json.dumps(body).encode()))
    assert str(error).startswith("brama: unsupported response:")
    assert error.permanent is True


def test_it_refuses_a_tool_call_without_a_name(fake_gateway: FakeGateway) -> None:
    error = refusal(fake_gateway, Reply(tool_calls=[("", "{}")]))
    assert str(error) == "brama: unsupported response: a tool call has no function name"
    assert error.permanent is True


@pytest.mark.parametrize(
    ("status", "permanent"),
    [(400, True), (401, True), (403, True), (404, True), (408, False), (429, False), (500, False), (503, False)],
)
def test_it_classes_http_errors_as_permanent_or_transient(
    fake_gateway: FakeGateway, status: int, permanent: bool
) -> None:
    error = refusal(fake_gateway, Reply(status=status, error_message=f"gateway says {status}"))
    assert error.permanent is permanent
    assert str(error).startswith(f"brama: HTTP {status}")
    assert f"gateway says {status}" in str(error)


def test_it_reports_an_unauthorised_key_as_permanent_with_the_servers_message(fake_gateway: FakeGateway) -> None:
    error = refusal(fake_gateway, Reply(status=401, error_message="invalid api key", error_type="auth"))
    assert str(error) == "brama: HTTP 401: invalid api key"
    assert error.permanent is True


def test_it_reports_a_refused_connection_as_transient() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (
        Gateway(f"http://127.0.0.1:{port}/v1", "k", max_retries=0, timeout=5) as gw,
        pytest.raises(GatewayError) as caught,
    ):
        complete(gw)
    assert caught.value.permanent is False
    assert str(caught.value).startswith("brama: cannot reach")


def test_it_reports_a_timeout_as_transient(fake_gateway: FakeGateway) -> None:
    error = refusal(fake_gateway, Reply(content="late", delay_s=1.0), timeout=0.2)
    assert error.permanent is False
    assert str(error).startswith("brama: timed out")


@pytest.mark.parametrize(
    "body",
    [b"this is not json", b'{"choices": "nope", "usage": {}}', b"[1, 2]", b'{"choices": [{"message": "text"}]}'],
)
def test_it_refuses_a_malformed_body_as_permanent(fake_gateway: FakeGateway, body: bytes) -> None:
    error = refusal(fake_gateway, Reply(raw_body=body))
    assert error.permanent is True
    assert str(error).startswith("brama: unsupported response:")


def test_it_parses_tool_calls_in_order_with_raw_arguments(fake_gateway: FakeGateway) -> None:
    raw = '{"b": 2,   "a": [1, 2]}'
    fake_gateway.script(Reply(tool_calls=[("self__read_file", raw), ("self__remember", {"text": "x"})]))
    result = complete(fake_gateway.gateway(), tools=[READ_TOOL, REMEMBER_TOOL])
    assert [call.name for call in result.tool_calls] == ["self__read_file", "self__remember"]
    assert result.tool_calls[0].arguments == raw
    assert json.loads(result.tool_calls[1].arguments) == {"text": "x"}
    assert all(isinstance(call, ToolCall) and call.id for call in result.tool_calls)
    assert result.content is None
    assert result.message["tool_calls"][0] == {
        "id": result.tool_calls[0].id,
        "type": "function",
        "function": {"name": "self__read_file", "arguments": raw},
    }


def test_its_elapsed_time_includes_the_servers_delay(fake_gateway: FakeGateway) -> None:
    fake_gateway.script(Reply(content="slow", delay_s=0.25))
    assert complete(fake_gateway.gateway()).elapsed_ns >= 250_000_000


def test_the_fake_answers_done_when_its_script_runs_out(fake_gateway: FakeGateway) -> None:
    fake_gateway.script(Reply(content="first"))
    gw = fake_gateway.gateway()
    assert complete(gw).content == "first"
    assert complete(gw).content == "done"
    assert len(fake_gateway.requests) == 2


def test_the_demo_policy_is_deterministic() -> None:
    request = {
        "model": "demo",
        "messages": [{"role": "user", "content": "Begin cycle 3"}],
        "tools": [REMEMBER_TOOL, READ_TOOL],
    }
    assert demo_policy(request, {}) == demo_policy(json.loads(json.dumps(request)), {})


def test_the_demo_policy_calls_a_tool_then_ends_the_cycle_with_text(fake_gateway: FakeGateway) -> None:
    fake_gateway.handler = demo_policy
    gw = fake_gateway.gateway()
    tools = [REMEMBER_TOOL, READ_TOOL]
    # Not a being's cycle (that is tests/singularity/test_demo_being.py): any conversation with tools.
    messages: list[dict] = [{"role": "user", "content": "Look at your notes and carry on."}]
    first = complete(gw, messages, tools)
    assert len(first.tool_calls) == 1
    call = first.tool_calls[0]
    assert call.name in {"self__remember", "self__read_file"}
    arguments = json.loads(call.arguments)
    if call.name == "self__remember":
        assert arguments["importance"] == 1 and arguments["pin"] is True
        assert arguments["text"].startswith("demo-note-")
    messages += [first.message, {"role": "tool", "tool_call_id": call.id, "content": '{"ok": true}'}]
    second = complete(gw, messages, tools)
    assert second.tool_calls == []
    assert second.content and call.name in second.content
    assert second.model == "test-model"


def test_the_demo_policy_remembers_on_some_cycles() -> None:
    chosen = {
        demo_policy(
            {"messages": [{"role": "user", "content": f"cycle {n}"}], "tools": [READ_TOOL, REMEMBER_TOOL]}, {}
        ).tool_calls[0][0]
        for n in range(20)
    }
    assert chosen == {"self__remember", "self__read_file"}


def test_the_demo_policy_answers_a_json_schema_with_a_valid_object() -> None:
    schema = {
        "type": "object",
        "properties": {
            "verdict": {"type": "string"},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
            "pass": {"type": "boolean"},
            "reasons": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["verdict", "score", "pass", "reasons"],
    }
    request = {
        "model": "judge",
        "messages": HELLO,
        "response_format": {"type": "json_schema", "json_schema": {"name": "grade", "schema": schema}},
    }
    answer = json.loads(demo_policy(request, {}).content or "")
    assert set(answer) == {"verdict", "score", "pass", "reasons"}
    assert isinstance(answer["verdict"], str) and answer["pass"] is True
    assert 0 <= answer["score"] <= 1 and all(isinstance(r, str) for r in answer["reasons"])


def test_the_gateway_passes_a_response_format_through(fake_gateway: FakeGateway) -> None:
    fake_gateway.handler = demo_policy
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    response_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    result = fake_gateway.gateway().complete(model="m", messages=HELLO, tools=[], response_format=response_format)
    assert json.loads(result.content or "") == {"ok": True}
    assert fake_gateway.requests[0].json["response_format"] == response_format


def test_the_demo_server_lists_its_model() -> None:
    with ChatCompletionsServer(demo_policy) as server:
        answer = httpx.get(server.base_url + "/models").json()
    assert answer["data"][0]["id"] == "demo-model"


def test_get_gateway_without_a_base_url_uses_the_demo_model(settings: Settings) -> None:
    settings.BRAMA_BASE_URL = ""
    assert is_demo()
    with get_gateway() as gw, get_gateway() as again:
        first = gw.complete(
            model="demo-model", messages=[{"role": "user", "content": "cycle 1"}], tools=[REMEMBER_TOOL]
        )
        assert again.base_url == gw.base_url  # one demo server per process
    assert first.tool_calls[0].name == "self__remember"
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens > 0


def test_get_gateway_reads_the_configured_gateway_and_secret_file(
    settings: Settings, fake_gateway: FakeGateway, tmp_path: Path
) -> None:
    secret_file = tmp_path / "brama.secret"
    secret_file.write_bytes(b"file-secret\n")
    settings.BRAMA_BASE_URL = fake_gateway.base_url
    settings.BRAMA_API_KEY = "sk-configured"
    settings.BRAMA_HMAC_SECRET_FILE = str(secret_file)
    settings.BRAMA_AGENT_ID = "agent-9"
    settings.BRAMA_MAX_RETRIES = 0
    assert not is_demo()
    with get_gateway() as gw:
        complete(gw)
    request = fake_gateway.requests[0]
    assert request.headers["authorization"] == "Bearer sk-configured"
    assert request.headers["x-agent-id"] == "agent-9"
    # The file's trailing newline is not part of the secret.
    timestamp = request.headers["x-agent-timestamp"]
    assert request.headers["x-agent-signature"] == sign(b"file-secret", "agent-9", timestamp, request.body)


def test_ping_answers_when_the_gateway_lists_models(fake_gateway):
    fake_gateway.gateway().ping()


def test_ping_of_an_unreachable_gateway_is_a_transient_error():
    from singularity.gateway import Gateway, GatewayError

    with pytest.raises(GatewayError, match="cannot reach") as info:
        Gateway("http://127.0.0.1:9/v1", "k", max_retries=0, timeout=2).ping()
    assert info.value.permanent is False


@pytest.mark.parametrize("key", ["prompt_tokens", "completion_tokens"])
def test_an_absurd_usage_block_is_a_permanent_error_carrying_the_block_and_the_wall_time(
    fake_gateway: FakeGateway, key: str
) -> None:
    block = {"prompt_tokens": 10, "completion_tokens": 5}
    block[key] = 10**30
    block["total_tokens"] = block["prompt_tokens"] + block["completion_tokens"]
    error = refusal(fake_gateway, Reply(content="x", usage=block))
    assert str(error) == (
        f"brama: unsupported response: usage {key} {10**30} is absurd: more than 1,000,000,000 tokens in one completion"
    )
    assert error.permanent is True
    assert error.usage == block
    assert error.elapsed_ns is not None and error.elapsed_ns > 0


def test_a_billion_tokens_is_still_accepted(fake_gateway: FakeGateway) -> None:
    block = {"prompt_tokens": 10**9, "completion_tokens": 0, "total_tokens": 10**9}
    fake_gateway.script(Reply(content="x", usage=block))
    assert complete(fake_gateway.gateway()).usage.prompt_tokens == 10**9


def test_every_gateway_of_a_process_shares_one_tls_context_that_still_verifies() -> None:
    # Building one loads the CA bundle: some 100 ms of CPU, once a grade when each grade made its own (issue 37).
    import ssl

    first, second = Gateway("https://gateway.example/v1", "key"), Gateway("https://other.example/v1", "")
    contexts = [gateway._http._transport._pool._ssl_context for gateway in (first, second)]
    assert contexts[0] is contexts[1]
    assert contexts[0].verify_mode == ssl.CERT_REQUIRED and contexts[0].check_hostname
