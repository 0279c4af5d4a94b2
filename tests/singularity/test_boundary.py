"""The output boundary: each rule replaces the whole result; ordinary results pass untouched."""

from __future__ import annotations

from typing import Any

import pytest

from singularity.tools.boundary import MAX_BYTES, MAX_DEPTH, cross_boundary


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _reason(value: Any) -> str:
    accepted, shown = cross_boundary(value)
    assert accepted is False
    assert set(shown) == {"error", "reason"} and shown["error"] == "output_rejected"
    return str(shown["reason"])


@pytest.mark.parametrize(
    "value",
    [
        {"order": {"revenue_usd": "1.25"}},
        {"usage": {"total_tokens": 12, "prompt_tokens": 10}, "secretary": "Ann", "keyboard": "qwerty"},
        {"link": "https://example.org/tmp/report", "relative": "notes/etc/todo.md", "note": "see ~/tmp/x"},
        "plain text",
        None,
        _nested(MAX_DEPTH),
        "x" * (MAX_BYTES - 2),
    ],
)
def test_it_lets_ordinary_results_through_unchanged(value: Any) -> None:
    assert cross_boundary(value) == (True, value)


def test_it_refuses_a_result_larger_than_32_kib() -> None:
    assert "larger than 32768 bytes" in _reason("x" * (MAX_BYTES - 1))


def test_it_counts_size_in_utf8_bytes() -> None:
    assert "larger than" in _reason("é" * (MAX_BYTES // 2))


def test_it_refuses_nesting_deeper_than_20() -> None:
    assert "nesting deeper than 20" in _reason(_nested(MAX_DEPTH + 1))


def test_it_survives_hostile_nesting() -> None:
    assert "nesting deeper" in _reason(_nested(100_000))


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "apiKey",
        "X-Api-Key",
        "APIKEY",
        "secret",
        "client_secret",
        "password",
        "db_passwd",
        "token",
        "github_token",
        "access_token",
        "accessToken",
        "private_key",
        "credential",
        "credentials",
        "Authorization",
        "cookie",
        "Set-Cookie",
    ],
)
def test_it_refuses_a_secret_looking_key_anywhere(key: str) -> None:
    assert "secret-looking key" in _reason({"items": [{"ok": 1}, {key: "x"}]})


def test_the_rejection_never_repeats_the_secret_value() -> None:
    accepted, shown = cross_boundary({"password": "hunter2"})
    assert not accepted and "hunter2" not in str(shown)


def test_it_refuses_a_pem_private_key() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIB...\n-----END RSA PRIVATE KEY-----"
    assert "private key" in _reason({"files": [pem]})
    assert "private key" in _reason("-----BEGIN PRIVATE KEY-----")


@pytest.mark.parametrize(
    "text",
    [
        "/home/alice/notes",
        "see /root/.ssh",
        "/Users/bob/x",
        "cat /etc/passwd",
        '"/var/lib/db"',
        "/tmp/x",
        "/proc/self/environ",
        "file:///etc/hosts",
        "C:\\Windows\\system32",
        "d:/data",
    ],
)
def test_it_refuses_a_local_absolute_path(text: str) -> None:
    assert "local filesystem path" in _reason({"out": text})


def test_it_checks_keys_for_paths_too() -> None:
    assert "local filesystem path in a key" in _reason({"/etc/hosts": 1})
    assert "/etc/" not in _reason({"/etc/passwd": 1})


def test_it_refuses_what_json_cannot_carry() -> None:
    assert "not JSON-serializable" in _reason({"x": object()})
    assert "not JSON-serializable" in _reason(float("nan"))
