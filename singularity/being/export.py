"""``being export``: the seed's files, so ``jq .budget state.json`` and ``grep cost_debited activity.jsonl`` work."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

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
    }


def event_line(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "ts": event.created_at.isoformat(),
        "event": event.kind,
        "cycle": event.cycle,
        **event.data,
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
