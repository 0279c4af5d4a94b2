"""The journal's hash chain: every event carries the hash of the one before it and its own.

An event's hash is SHA-256 over the canonical JSON of its exported line (see
``singularity.being.export.event_line``) without the ``hash`` key: keys
sorted, no spaces, UTF-8. Its ``prev_hash`` is the hash of the event before
it ("" for the first), so editing, dropping or reordering any event breaks
the chain at that event. ``verify_lines`` checks a sequence of exported
lines — from the database or from an ``activity.jsonl`` file — and names the
first event that does not hold.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: ``json.dumps`` with these arguments builds an encoder on every call; one made once writes the same text.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical(line: dict[str, Any]) -> bytes:
    """The canonical JSON form of ``line``: sorted keys, no whitespace, UTF-8, the ``hash`` key left out."""
    body = {key: value for key, value in line.items() if key != "hash"} if "hash" in line else line
    return _CANONICAL.encode(body).encode()


def line_hash(line: dict[str, Any]) -> str:
    """The lowercase hex SHA-256 of ``line``'s canonical form."""
    return hashlib.sha256(canonical(line)).hexdigest()


@dataclass(frozen=True)
class Verdict:
    """What ``verify_lines`` found: the events checked, and the first break (its position, seq and why) if any."""

    checked: int
    broken_at: int | None = None
    seq: Any = None
    reason: str = ""
    #: Events from before the chain began (written before hashing existed): a prefix with no hashes.
    unchained: int = 0

    @property
    def whole(self) -> bool:
        return self.broken_at is None


def verify_lines(lines: Iterable[dict[str, Any]]) -> Verdict:
    """Check every line's own hash and its link to the line before; return the first break or a whole verdict.

    Lines with no ``hash`` are accepted only before the first hashed line
    (a journal written before chaining began); after it, every line must
    carry both hashes, link to the previous hash and hash to its own.
    """
    previous = ""
    chained = False
    unchained = 0
    checked = 0
    expected_seq: int | None = None
    for position, line in enumerate(lines, start=1):
        checked = position
        seq = line.get("seq") if isinstance(line, dict) else None
        if not isinstance(line, dict):
            return Verdict(checked, position, None, "the line is not a JSON object")
        if expected_seq is not None and seq != expected_seq:
            return Verdict(checked, position, seq, f"seq {seq!r} follows seq {expected_seq - 1}: an event is missing")
        if isinstance(seq, int) and not isinstance(seq, bool):
            expected_seq = seq + 1
        own, prev = line.get("hash", ""), line.get("prev_hash", "")
        if not own and not chained:
            unchained += 1
            continue
        chained = True
        if prev != previous:
            return Verdict(checked, position, seq, "prev_hash is not the hash of the event before it")
        if own != line_hash(line):
            return Verdict(checked, position, seq, "the event's content does not match its hash")
        previous = own
    return Verdict(checked, unchained=unchained)


def verify_export(data: bytes, *, head: str | None = None, events: int | None = None) -> Verdict:
    """Verify an exported ``activity.jsonl`` byte for byte.

    Each line must be valid UTF-8 JSON written exactly as the export writes
    it (so even a change the parser would not see, such as a space, is a
    break), and the chain must hold. ``head`` and ``events`` (from the
    export's ``state.json``) also catch events cut off the end.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Verdict(0, data.count(b"\n", 0, exc.start) + 1, None, f"not UTF-8 at byte {exc.start}")
    if text and not text.endswith("\n"):
        return Verdict(0, text.count("\n") + 1, None, "the last line does not end with a newline")
    lines: list[dict[str, Any]] = []
    for position, raw in enumerate(text.split("\n")[:-1] if text else [], start=1):
        try:
            line = json.loads(raw)
        except ValueError as exc:
            return _first_break(lines) or Verdict(position, position, None, f"line {position} is not JSON ({exc})")
        if not isinstance(line, dict) or json.dumps(line, ensure_ascii=False) != raw:
            seq = line.get("seq") if isinstance(line, dict) else None
            return _first_break(lines) or Verdict(position, position, seq, "the line is not as the export wrote it")
        lines.append(line)
    verdict = verify_lines(lines)
    if not verdict.whole:
        return verdict
    last = lines[-1] if lines else {}
    if events is not None and last.get("seq", 0) != events:
        return Verdict(len(lines), len(lines), last.get("seq"), f"the journal ends before event {events}")
    if head is not None and last.get("hash", "") != head:
        return Verdict(len(lines), len(lines), last.get("seq"), "the newest event is not the head state.json records")
    return verdict


def _first_break(lines: list[dict[str, Any]]) -> Verdict | None:
    verdict = verify_lines(lines)
    return None if verdict.whole else verdict
