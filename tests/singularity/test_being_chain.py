"""The journal's hash chain: every event links to the one before; ``being verify`` names the first break."""

from __future__ import annotations

import hashlib
import json

import pytest

from singularity.being.chain import canonical, line_hash, verify_export
from singularity.being.export import event_line, export_being, verify_being
from singularity.models import Being, Event
from singularity.tools import build_catalogue
from tests.fakes.gateway import Reply
from tests.singularity.helpers import make_being, make_runtime, manage, manage_env

REMEMBER = ("self__remember", {"key": "k", "value": "v é"})


@pytest.fixture
def catalogue(settings, tmp_path):
    settings.SINGULARITY_WORKSPACE = tmp_path / "workspace"
    with build_catalogue(mcp_config_path="") as cat:
        yield cat


def lived(fake_gateway, catalogue, cycles: int = 2) -> Being:
    """A being that lived ``cycles`` cycles, each a tool call then a plain reply."""
    being = make_being()
    runtime = make_runtime(being, fake_gateway.gateway(), catalogue)
    for _ in range(cycles):
        fake_gateway.script(Reply(tool_calls=[REMEMBER]), Reply(content="rest"))
        runtime.run_cycle()
    return being


@pytest.mark.django_db
def test_every_event_carries_the_hash_of_the_one_before_and_its_own(fake_gateway, catalogue):
    being = lived(fake_gateway, catalogue)
    events = list(Event.objects.filter(being=being).order_by("seq"))
    assert len(events) >= 8
    previous = ""
    for event in events:
        assert event.prev_hash == previous
        assert event.hash == line_hash(event_line(event)) and len(event.hash) == 64
        previous = event.hash
    being.refresh_from_db()
    assert being.event_hash == previous
    assert verify_being(being).whole


@pytest.mark.django_db
def test_an_edited_stored_event_is_named_by_its_seq(fake_gateway, catalogue):
    being = lived(fake_gateway, catalogue)
    debit = Event.objects.filter(being=being, kind="cost_debited").order_by("seq")[1]
    Event.objects.filter(pk=debit.pk).update(data={**debit.data, "amount": "1.00"})
    verdict = verify_being(being)
    assert not verdict.whole and verdict.seq == debit.seq
    assert "does not match its hash" in verdict.reason


@pytest.mark.django_db
def test_a_dropped_event_breaks_the_chain_at_the_one_after(fake_gateway, catalogue):
    being = lived(fake_gateway, catalogue)
    Event.objects.filter(being=being, seq=3).delete()
    verdict = verify_being(being)
    assert not verdict.whole and verdict.seq == 4


@pytest.mark.django_db
def test_tampering_with_any_byte_of_an_exported_journal_is_caught(fake_gateway, catalogue, tmp_path):
    being = lived(fake_gateway, catalogue, cycles=1)
    being.refresh_from_db()
    _, activity = export_being(being, tmp_path / "export")
    state = json.loads((tmp_path / "export" / "state.json").read_text())
    head = state["journal"]
    data = activity.read_bytes()
    assert verify_export(data, **head).whole
    for position in range(len(data)):
        edited = data[:position] + bytes([data[position] ^ 0x01]) + data[position + 1 :]
        assert not verify_export(edited, **head).whole, f"byte {position} changed went unnoticed"
    # A change the JSON parser would not see (a space for a tab) is caught too.
    assert not verify_export(data.replace(b", ", b",\t", 1), **head).whole
    # Cutting the last event off is caught by the head state.json records.
    cut = data[: data.rstrip(b"\n").rfind(b"\n") + 1]
    assert not verify_export(cut, **head).whole


@pytest.mark.django_db(transaction=True)
def test_being_verify_exits_0_when_whole_and_names_the_first_broken_event(fake_gateway, tmp_path):
    fake_gateway.script(Reply(tool_calls=[REMEMBER]), Reply(content="rest"))
    env = manage_env(
        BRAMA_BASE_URL=fake_gateway.base_url, BRAMA_MAX_RETRIES="0", SINGULARITY_WORKSPACE=str(tmp_path / "ws")
    )
    assert manage("being", "once", "--name", "ada", env=env).returncode == 0
    proc = manage("being", "verify", "--name", "ada", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "chain whole" in proc.stdout

    out = tmp_path / "export"
    assert manage("being", "export", "--name", "ada", "--dir", str(out), env=env).returncode == 0
    proc = manage("being", "verify", "--file", str(out / "activity.jsonl"), env=env)
    assert proc.returncode == 0, proc.stderr

    lines = (out / "activity.jsonl").read_text().splitlines()
    edited = [json.loads(line) for line in lines]
    target = next(line for line in edited if line["event"] == "cost_debited")
    target["amount"] = "1.00"
    (out / "activity.jsonl").write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in edited))
    proc = manage("being", "verify", "--file", str(out / "activity.jsonl"), env=env)
    assert proc.returncode == 4
    assert f"event seq {target['seq']}" in proc.stderr

    Event.objects.filter(being__name="ada", seq=target["seq"]).update(cycle=7)
    proc = manage("being", "verify", "--name", "ada", env=env)
    assert proc.returncode == 4 and f"event seq {target['seq']}" in proc.stderr


def test_the_canonical_form_is_sorted_compact_utf8_json_without_the_hash():
    line = {
        "seq": 2,
        "ts": "2026-12-06T22:30:01.123456+00:00",
        "event": "warning",
        "cycle": 1,
        "message": "é \u0000 ü",
        "n": 1.5,
        "z": None,
        "a": [1, {"b": 2, "a": 1}],
        "prev_hash": "ab",
        "hash": "not hashed",
    }
    text = (
        '{"a":[1,{"a":1,"b":2}],"cycle":1,"event":"warning","message":"é \\u0000 ü","n":1.5,"prev_hash":"ab",'
        '"seq":2,"ts":"2026-12-06T22:30:01.123456+00:00","z":null}'
    )
    assert canonical(line) == text.encode()
    assert line_hash(line) == hashlib.sha256(text.encode()).hexdigest()
    assert "hash" in line  # the caller's line is left as it was
    with pytest.raises(ValueError):
        canonical({"n": float("nan")})
