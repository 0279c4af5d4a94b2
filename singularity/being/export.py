"""``being export``: the seed's files, so ``jq .budget state.json`` and ``grep cost_debited activity.jsonl`` work."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from singularity.being.chain import Verdict, verify_lines
from singularity.models import Being, Event
from singularity.money import money_str


def state_document(being: Being) -> dict[str, Any]:
    """The being as ``state.json``: status, cycle, the budget (money as decimal strings) and the mind."""
    return {
        "name": being.name,
        "status": being.status,
        "cycle": being.cycle,
        "budget": {
            key: (value if key == "total_tokens" else money_str(value)) for key, value in being.budget().items()
        },
        "mind": {
            "model": being.model,
            "system_prompt": being.system_prompt,
            "rules": being.rules,
            "learnings": being.learnings,
            "memories": being.memories,
            "children": list(being.children.order_by("name").values_list("name", flat=True)),
            "parent": being.parent.name if being.parent else None,
        },
        "recent_actions": being.recent_actions,
        # The chain's head: an export whose events were all rewritten (hashes recomputed) ends elsewhere.
        "journal": {"events": being.event_seq, "head": being.event_hash},
    }


def event_line(event: Event) -> dict[str, Any]:
    """One ``activity.jsonl`` line; its canonical form without ``hash`` is what the chain hashes."""
    return {
        "seq": event.seq,
        "ts": event.created_at.isoformat(),
        "event": event.kind,
        "cycle": event.cycle,
        **event.data,
        # Last, so a key in ``data`` cannot shadow them.
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def _write_atomically(path: Path, writer: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            writer(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def export_being(being: Being, directory: Path) -> tuple[Path, Path]:
    """Write ``state.json`` and ``activity.jsonl`` into ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    state_path, activity_path = directory / "state.json", directory / "activity.jsonl"
    _write_atomically(state_path, lambda h: json.dump(state_document(being), h, indent=2, ensure_ascii=False))

    def write_events(handle: Any) -> None:
        for event in Event.objects.filter(being=being).order_by("seq").iterator(chunk_size=2000):
            handle.write(json.dumps(event_line(event), ensure_ascii=False) + "\n")

    _write_atomically(activity_path, write_events)
    return state_path, activity_path


def verify_being(being: Being) -> Verdict:
    """Verify the stored journal of ``being``: its chain, and that it ends at the head the being records."""
    lines = (event_line(e) for e in Event.objects.filter(being=being).order_by("seq").iterator(chunk_size=2000))
    verdict = verify_lines(lines)
    if verdict.whole and verdict.checked > verdict.unchained:
        last = Event.objects.filter(being=being).order_by("-seq").first()
        if last is not None and last.hash != being.event_hash:
            return Verdict(
                verdict.checked, verdict.checked, last.seq, "the newest event is not the head the being records"
            )
    return verdict


def describe(verdict: Verdict, what: str) -> str:
    """One line saying whether ``what``'s journal is whole, or where and why it first breaks."""
    if verdict.whole:
        older = f" ({verdict.unchained} older events written before chaining began)" if verdict.unchained else ""
        return f"{what}: {verdict.checked} events, chain whole{older}"
    return f"{what}: the chain breaks at event seq {verdict.seq} (line {verdict.broken_at}): {verdict.reason}"
