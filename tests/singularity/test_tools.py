"""The tool catalogue: MCP servers as real child processes (and one over HTTP), and the built-in self tools."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.errors import ConfigError, UpstreamError
from singularity.models import Being
from singularity.tools import ToolCatalogue, ToolOutcome, ToolSpec, build_catalogue
from singularity.tools.builtin import MAX_FILE_BYTES
from singularity.tools.catalogue import check_names
from tests.fakes.mcp_fixtures import ECHO_SERVER, FINANCE_SERVER, stdio_entry

WriteConfig = Callable[[dict[str, Any]], str]


def _alive(pid: int) -> bool:
    """Return whether ``pid`` is a live process (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _children(catalogue: ToolCatalogue) -> set[int]:
    assert catalogue._host is not None
    return catalogue._host.child_pids()


def _wait_dead(pids: set[int], timeout: float = 2.0) -> set[int]:
    """Return the pids still alive after up to ``timeout`` seconds (reaping takes a moment)."""
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return {pid for pid in pids if _alive(pid)}


@pytest.fixture
def catalogue(mcp_config: str) -> Iterator[ToolCatalogue]:
    with build_catalogue(mcp_config_path=mcp_config, call_timeout=1.0, shutdown_grace=2.0) as built:
        yield built


@pytest.fixture
def being(db: None, settings: Any, tmp_path: Path) -> Being:
    settings.SINGULARITY_WORKSPACE = tmp_path / "workspace"
    return Being.objects.create(name="alpha", starting=Decimal(10), remaining=Decimal(10), model="m", system_prompt="p")


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


# --- the catalogue of MCP tools ------------------------------------------------


def test_it_names_mcp_tools_server_double_underscore_tool(catalogue: ToolCatalogue) -> None:
    names = [spec.name for spec in catalogue.specs()]
    assert names[: names.index("self__spawn_child") + 1] == [n for n in names if n.startswith("self__")]
    assert [n for n in names if not n.startswith("self__")] == [
        "finance__sell",
        "finance__report",
        "finance__refund",
        "finance__zero",
        "finance__garbage",
        "finance__leak",
        "echo__echo",
        "echo__fail",
        "echo__crash",
        "echo__sleep",
        "echo__write_marker",
        "echo__read_marker",
    ]
    sources = {spec.name: spec.source for spec in catalogue.specs()}
    assert (sources["finance__sell"], sources["echo__echo"], sources["self__recall"]) == (
        "mcp:finance",
        "mcp:echo",
        "builtin",
    )


def test_openai_tools_are_functions_in_the_same_stable_order(catalogue: ToolCatalogue) -> None:
    tools = catalogue.openai_tools()
    assert [t["function"]["name"] for t in tools] == [s.name for s in catalogue.specs()]
    echo = next(t for t in tools if t["function"]["name"] == "echo__echo")
    assert echo["type"] == "function"
    assert echo["function"]["parameters"]["required"] == ["text"]
    assert echo["function"]["description"] == "Return the text unchanged."


def test_a_call_returns_the_structured_result_as_raw(catalogue: ToolCatalogue) -> None:
    outcome = catalogue.call(None, "finance__sell", "{}")
    assert (outcome.status, outcome.error) == ("success", "")
    assert outcome.raw == {"order": {"revenue_usd": "1.25"}}
    assert outcome.result == outcome.raw
    assert outcome.duration_ms >= 0
    report = catalogue.call(None, "finance__report", {})
    assert report.raw == {"items": [{"realized_profit_usd": 2.5}]}


def test_arguments_reach_the_tool(catalogue: ToolCatalogue) -> None:
    outcome = catalogue.call(None, "echo__echo", '{"text": "hello"}')
    assert (outcome.status, outcome.raw) == ("success", {"result": "hello"})


def test_a_rejected_result_keeps_success_and_raw_but_hides_the_result(catalogue: ToolCatalogue) -> None:
    outcome = catalogue.call(None, "finance__leak", {})
    assert outcome.status == "success"
    assert outcome.raw == {"api_key": "x"}
    assert outcome.result["error"] == "output_rejected"
    assert "x" not in str(outcome.result.get("value", ""))


def test_a_tool_error_is_a_failed_outcome(catalogue: ToolCatalogue) -> None:
    outcome = catalogue.call(None, "echo__fail", {})
    assert outcome.status == "failed"
    assert "failed on purpose" in outcome.error
    assert outcome.raw is None
    assert outcome.result == {"error": outcome.error}


def test_each_call_runs_the_tool_exactly_once(catalogue: ToolCatalogue, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    first = catalogue.call(None, "echo__write_marker", {"path": str(marker)})
    second = catalogue.call(None, "echo__write_marker", {"path": str(marker)})
    assert (first.raw, second.raw) == ({"lines": 1}, {"lines": 2})
    assert _lines(marker) == 2


def test_a_crash_mid_call_is_indeterminate_and_never_retried(catalogue: ToolCatalogue, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    outcome = catalogue.call(None, "echo__crash", {"marker": str(marker)})
    assert outcome.status == "indeterminate"
    assert outcome.error.startswith("transport failure: ")
    assert "exited with code 1" in outcome.error
    assert outcome.raw is None
    assert _lines(marker) == 1

    again = catalogue.call(None, "echo__crash", {"marker": str(marker)})
    assert again.status == "failed"
    assert "not called" in again.error
    assert _lines(marker) == 1
    # The other server is untouched.
    assert catalogue.call(None, "finance__sell", {}).status == "success"


def test_a_call_past_its_deadline_is_indeterminate(catalogue: ToolCatalogue) -> None:
    started = time.monotonic()
    outcome = catalogue.call(None, "echo__sleep", {"seconds": 5})
    assert outcome.status == "indeterminate"
    assert "within 1s" in outcome.error
    assert 1.0 <= time.monotonic() - started < 3.0
    assert outcome.duration_ms >= 1000
    # The session is still usable.
    assert catalogue.call(None, "echo__echo", {"text": "still here"}).raw == {"result": "still here"}


def test_an_unknown_tool_fails_without_calling_anything(catalogue: ToolCatalogue) -> None:
    for name in ("echo__nope", "nope", "self__nope", "bank__pay"):
        outcome = catalogue.call(None, name, {})
        assert (outcome.status, outcome.error) == ("failed", f"unknown_tool: {name}")


def test_arguments_that_are_not_json_fail(catalogue: ToolCatalogue) -> None:
    outcome = catalogue.call(None, "echo__echo", '{"text": ')
    assert outcome.status == "failed"
    assert outcome.error.startswith("invalid arguments: not JSON: ")


@pytest.mark.parametrize("arguments", ['["hello"]', '"hello"', "3", ["hello"]])
def test_arguments_that_are_not_an_object_fail(catalogue: ToolCatalogue, arguments: Any) -> None:
    outcome = catalogue.call(None, "echo__echo", arguments)
    assert outcome.status == "failed"
    assert outcome.error.startswith("invalid arguments: expected a JSON object")


def test_empty_arguments_mean_no_arguments(catalogue: ToolCatalogue) -> None:
    assert catalogue.call(None, "finance__zero", "").raw == {"revenue_usd": 0}


def test_the_http_transport_works(mcp_http_server: Any, write_mcp_config: WriteConfig) -> None:
    path = write_mcp_config({"web": {"url": mcp_http_server.url, "type": "http"}})
    with build_catalogue(mcp_config_path=path, call_timeout=2.0, shutdown_grace=2.0) as catalogue:
        assert "web__echo" in [spec.name for spec in catalogue.specs()]
        outcome = catalogue.call(None, "web__echo", {"text": "over http"})
        assert (outcome.status, outcome.raw) == ("success", {"result": "over http"})
        assert catalogue.call(None, "web__fail", {}).status == "failed"
        assert catalogue.call(None, "web__sleep", {"seconds": 5}).status == "indeterminate"


def test_an_http_server_going_away_is_a_transport_failure(mcp_http_server: Any, write_mcp_config: WriteConfig) -> None:
    path = write_mcp_config({"web": {"url": mcp_http_server.url}})
    with build_catalogue(mcp_config_path=path, call_timeout=2.0, shutdown_grace=2.0) as catalogue:
        mcp_http_server.process.kill()
        mcp_http_server.process.wait()
        outcome = catalogue.call(None, "web__echo", {"text": "anyone?"})
        assert outcome.status == "indeterminate"
        assert outcome.error == "transport failure: ConnectError: All connection attempts failed"
        assert outcome.raw is None


def test_an_unreachable_http_server_fails_the_build(write_mcp_config: WriteConfig) -> None:
    path = write_mcp_config({"web": {"url": "http://127.0.0.1:9/mcp"}})
    with pytest.raises(UpstreamError) as caught:
        build_catalogue(mcp_config_path=path, call_timeout=5.0, shutdown_grace=1.0)
    assert caught.value.permanent
    assert "server web failed to start" in str(caught.value)
    assert "ConnectError" in str(caught.value)


def test_a_server_that_fails_to_start_names_itself_and_stops_the_others(write_mcp_config: WriteConfig) -> None:
    path = write_mcp_config(
        {
            "finance": stdio_entry(FINANCE_SERVER),
            "broken": {
                "command": sys.executable,
                "args": ["-c", "import sys; print('no mcp here', file=sys.stderr); sys.exit(3)"],
            },
        }
    )
    before = _our_children()
    with pytest.raises(UpstreamError) as caught:
        build_catalogue(mcp_config_path=path, call_timeout=5.0, shutdown_grace=2.0)
    assert caught.value.permanent
    message = str(caught.value)
    assert "server broken failed to start" in message
    assert "exited with code 3" in message
    assert "no mcp here" in message
    assert _wait_dead(_our_children() - before) == set()


def test_a_missing_command_fails_the_build(write_mcp_config: WriteConfig) -> None:
    path = write_mcp_config({"ghost": {"command": "singularity-no-such-command"}})
    with pytest.raises(UpstreamError, match="server ghost failed to start: FileNotFoundError"):
        build_catalogue(mcp_config_path=path, call_timeout=5.0, shutdown_grace=1.0)


def test_a_bad_config_fails_the_build_naming_file_and_key(write_mcp_config: WriteConfig) -> None:
    path = write_mcp_config({"finance": {"command": sys.executable, "args": "oops"}})
    with pytest.raises(ConfigError, match=f"mcp config {path}: mcpServers.finance.args: expected a list of strings"):
        build_catalogue(mcp_config_path=path)


def test_duplicate_tool_names_are_refused() -> None:
    spec = ToolSpec("finance__sell", "", {"type": "object"}, "mcp:finance")
    with pytest.raises(ConfigError, match="finance__sell: offered by both"):
        check_names([spec, ToolSpec("finance__sell", "", {}, "mcp:other")])
    with pytest.raises(ConfigError, match="a tool name is at most 64"):
        check_names([ToolSpec("finance__" + "x" * 60, "", {}, "mcp:finance")])
    with pytest.raises(ConfigError, match="a tool name is at most 64"):
        check_names([ToolSpec("finance__sell now", "", {}, "mcp:finance")])


def test_without_a_config_there_are_only_builtins(settings: Any) -> None:
    settings.SINGULARITY_MCP_CONFIG = ""
    with build_catalogue() as catalogue:
        assert all(spec.source == "builtin" for spec in catalogue.specs())
        assert catalogue.call(None, "echo__echo", {}).error == "unknown_tool: echo__echo"


# --- shutdown ------------------------------------------------------------------


def _our_children() -> set[int]:
    """Return the pids whose parent is this test process."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[1]) == me and fields[0] not in ("Z", "X"):
                found.add(int(entry))
    return found


def test_close_leaves_no_child_alive(mcp_config: str) -> None:
    catalogue = build_catalogue(mcp_config_path=mcp_config, call_timeout=1.0, shutdown_grace=2.0)
    pids = _children(catalogue)
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    started = time.monotonic()
    catalogue.close()
    assert time.monotonic() - started < 2.0
    assert _wait_dead(pids) == set()
    catalogue.close()  # twice is harmless
    assert catalogue.call(None, "echo__echo", {"text": "x"}).status == "failed"


def test_close_kills_a_stubborn_child_within_the_grace(write_mcp_config: WriteConfig) -> None:
    path = write_mcp_config({"echo": stdio_entry(ECHO_SERVER, "--stubborn")})
    catalogue = build_catalogue(mcp_config_path=path, call_timeout=30.0, shutdown_grace=1.5)
    pids = _children(catalogue)
    in_flight: list[ToolOutcome] = []
    caller = threading.Thread(target=lambda: in_flight.append(catalogue.call(None, "echo__sleep", {"seconds": 30})))
    caller.start()
    time.sleep(0.3)
    started = time.monotonic()
    catalogue.close()
    assert time.monotonic() - started < 1.5 + 0.5
    assert _wait_dead(pids, timeout=0.5) == set()
    caller.join(timeout=5)
    assert not caller.is_alive()
    assert in_flight[0].status in ("indeterminate", "failed")


# --- built-in tools --------------------------------------------------------------


@pytest.fixture
def builtins() -> ToolCatalogue:
    return ToolCatalogue()


def _ok(catalogue: ToolCatalogue, being: Being, tool: str, /, **arguments: Any) -> Any:
    outcome = catalogue.call(being, tool, arguments)
    assert outcome.status == "success", outcome.error
    return outcome.raw


def _refused(catalogue: ToolCatalogue, being: Being, tool: str, /, **arguments: Any) -> str:
    outcome = catalogue.call(being, tool, arguments)
    assert outcome.status == "failed"
    assert outcome.raw is None
    return outcome.error


def test_remember_recall_and_forget(builtins: ToolCatalogue, being: Being) -> None:
    assert _ok(builtins, being, "self__remember", key="goal", value="profit") == {"remembered": "goal", "memories": 1}
    assert _ok(builtins, being, "self__recall", key="goal") == {"key": "goal", "value": "profit"}
    _ok(builtins, being, "self__remember", key="goal", value="more profit")
    assert being.memories == {"goal": "more profit"}
    assert _ok(builtins, being, "self__forget", key="goal") == {"forgotten": "goal", "memories": 0}
    assert "no memory named 'goal'" in _refused(builtins, being, "self__recall", key="goal")
    assert "no memory named" in _refused(builtins, being, "self__forget", key="goal")


def test_tools_do_not_save_the_being(builtins: ToolCatalogue, being: Being) -> None:
    _ok(builtins, being, "self__remember", key="k", value="v")
    _ok(builtins, being, "self__add_rule", rule="r")
    being.refresh_from_db()
    assert (being.memories, being.rules) == ({}, [])


def test_memory_bounds(builtins: ToolCatalogue, being: Being) -> None:
    assert "key is 101 characters" in _refused(builtins, being, "self__remember", key="k" * 101, value="v")
    assert "value is 4097 bytes" in _refused(builtins, being, "self__remember", key="k", value="v" * 4097)
    assert "must not be empty" in _refused(builtins, being, "self__remember", key=" ", value="v")
    _ok(builtins, being, "self__remember", key="k" * 100, value="é" * 2048)
    being.memories = {f"m{i}": "v" for i in range(200)}
    assert "memory is full (200 keys)" in _refused(builtins, being, "self__remember", key="new", value="v")
    _ok(builtins, being, "self__remember", key="m0", value="replaced")
    assert len(being.memories) == 200


def test_set_prompt(builtins: ToolCatalogue, being: Being) -> None:
    _ok(builtins, being, "self__set_prompt", prompt="Earn more than you spend.")
    assert being.system_prompt == "Earn more than you spend."
    assert "8192" in _refused(builtins, being, "self__set_prompt", prompt="x" * 8193)
    assert "must not be empty" in _refused(builtins, being, "self__set_prompt", prompt="  ")
    assert being.system_prompt == "Earn more than you spend."


def test_rules_and_learnings_are_append_only_and_bounded(builtins: ToolCatalogue, being: Being) -> None:
    _ok(builtins, being, "self__add_rule", rule="never sell at a loss")
    assert _ok(builtins, being, "self__add_rule", rule="check prices") == {"rules": 2}
    assert being.rules == ["never sell at a loss", "check prices"]
    assert _ok(builtins, being, "self__add_learning", learning="refunds hurt") == {"learnings": 1}
    assert being.learnings == ["refunds hurt"]
    assert "8192" in _refused(builtins, being, "self__add_rule", rule="x" * 8193)
    being.rules = ["r"] * 500
    being.learnings = ["l"] * 500
    assert "already 500 rules" in _refused(builtins, being, "self__add_rule", rule="one more")
    assert "already 500 learnings" in _refused(builtins, being, "self__add_learning", learning="one more")


def test_switch_model(builtins: ToolCatalogue, being: Being) -> None:
    assert _ok(builtins, being, "self__switch_model", model="big-model") == {"model": "big-model", "previous": "m"}
    assert being.model == "big-model"
    assert "must not be empty" in _refused(builtins, being, "self__switch_model", model="")
    assert "limit is 200" in _refused(builtins, being, "self__switch_model", model="x" * 201)


def test_builtin_arguments_are_validated(builtins: ToolCatalogue, being: Being) -> None:
    assert _refused(builtins, being, "self__remember", key="k") == "invalid arguments: value: required"
    assert (
        _refused(builtins, being, "self__remember", key="k", value=3)
        == "invalid arguments: value: expected a string, got number"
    )
    assert (
        _refused(builtins, being, "self__recall", key="k", extra=1) == "invalid arguments: extra: unexpected argument"
    )
    assert being.memories == {}


def test_write_read_and_list_files_in_the_workspace(builtins: ToolCatalogue, being: Being, settings: Any) -> None:
    assert _ok(builtins, being, "self__write_file", path="notes/plan.md", content="sell high") == {
        "path": "notes/plan.md",
        "bytes": 9,
    }
    assert (settings.SINGULARITY_WORKSPACE / "alpha" / "notes" / "plan.md").read_text() == "sell high"
    _ok(builtins, being, "self__write_file", path="notes/plan.md", content="sell higher")
    assert _ok(builtins, being, "self__read_file", path="notes/plan.md") == {
        "path": "notes/plan.md",
        "content": "sell higher",
    }
    assert _ok(builtins, being, "self__list_files") == {
        "path": ".",
        "entries": [{"name": "notes", "type": "dir", "size": None}],
        "truncated": False,
    }
    listed = _ok(builtins, being, "self__list_files", path="notes")
    assert listed["entries"] == [{"name": "plan.md", "type": "file", "size": 11}]
    # No temporary file is left behind by the atomic write.
    assert os.listdir(settings.SINGULARITY_WORKSPACE / "alpha" / "notes") == ["plan.md"]


def test_file_results_never_show_an_absolute_path(builtins: ToolCatalogue, being: Being) -> None:
    outcome = builtins.call(being, "self__write_file", {"path": "a.txt", "content": "x"})
    assert outcome.result == outcome.raw
    outcome = builtins.call(being, "self__read_file", {"path": "missing.txt"})
    assert outcome.result == {"error": "missing.txt: no such file"}


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("../x", "'..'"),
        ("notes/../../x", "'..'"),
        ("/etc/passwd", "relative to the workspace"),
        ("C:\\Windows\\win.ini", "relative to the workspace"),
        ("a\x00b", "NUL"),
        ("", "must name a file"),
    ],
)
def test_workspace_escapes_are_refused(builtins: ToolCatalogue, being: Being, path: str, problem: str) -> None:
    assert problem in _refused(builtins, being, "self__read_file", path=path)
    assert problem in _refused(builtins, being, "self__write_file", path=path, content="x")


def test_a_symlink_leading_outside_is_refused(
    builtins: ToolCatalogue, being: Being, settings: Any, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    root = settings.SINGULARITY_WORKSPACE / "alpha"
    root.mkdir(parents=True)
    (root / "link").symlink_to(outside)
    (root / "file-link").symlink_to(outside / "secret.txt")
    assert "leads outside the workspace" in _refused(builtins, being, "self__read_file", path="link/secret.txt")
    assert "leads outside the workspace" in _refused(builtins, being, "self__read_file", path="file-link")
    assert "leads outside the workspace" in _refused(builtins, being, "self__write_file", path="file-link", content="x")
    assert "leads outside the workspace" in _refused(builtins, being, "self__list_files", path="link")
    assert (outside / "secret.txt").read_text() == "secret"


def test_files_over_one_mib_are_refused(builtins: ToolCatalogue, being: Being, settings: Any) -> None:
    assert "limit is 1048576" in _refused(
        builtins, being, "self__write_file", path="big", content="x" * (MAX_FILE_BYTES + 1)
    )
    root = settings.SINGULARITY_WORKSPACE / "alpha"
    root.mkdir(parents=True, exist_ok=True)
    (root / "big").write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    assert "limit is 1048576" in _refused(builtins, being, "self__read_file", path="big")
    (root / "bin").write_bytes(b"\xff\xfe")
    assert "not UTF-8 text" in _refused(builtins, being, "self__read_file", path="bin")


def test_spawn_child_creates_a_child_being_funded_by_its_parent(builtins: ToolCatalogue, being: Being) -> None:
    result = _ok(builtins, being, "self__spawn_child", name="alpha-jr", prompt="Trade carefully.", balance_usd="2.5")
    assert result == {"child": "alpha-jr", "starting_usd": "2.50", "remaining_usd": "7.50"}
    child = Being.objects.get(name="alpha-jr")
    assert (child.parent_id, child.system_prompt, child.starting, child.remaining) == (
        being.pk,
        "Trade carefully.",
        Decimal("2.5"),
        Decimal("2.5"),
    )
    assert being.remaining == Decimal("7.5")
    assert "alpha-jr" in _refused(
        builtins, being, "self__spawn_child", name="alpha-jr", prompt="again", balance_usd="1"
    )
    assert "not a valid being name" in _refused(
        builtins, being, "self__spawn_child", name="bad name!", prompt="p", balance_usd="1"
    )
    assert Being.objects.count() == 2 and being.remaining == Decimal("7.5")


def test_spawn_child_with_fresh_balances_configured(builtins: ToolCatalogue, being: Being, settings: Any) -> None:
    settings.SINGULARITY_CHILD_FRESH_BALANCE = True
    settings.SINGULARITY_CHILD_STARTING_BALANCE_USD = Decimal("2.5")
    result = _ok(builtins, being, "self__spawn_child", name="alpha-jr", prompt="Trade carefully.")
    assert result == {"child": "alpha-jr", "starting_usd": "2.50", "remaining_usd": "10.00"}
    assert Being.objects.get(name="alpha-jr").remaining == Decimal("2.5")
