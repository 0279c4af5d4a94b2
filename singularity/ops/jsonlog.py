"""``LOG_FORMAT=json``: one JSON object a line, whatever the message holds.

Each record has ``time`` (ISO 8601, UTC), ``level``, ``logger``,
``message`` (newlines and all, escaped by JSON so the record stays one line),
``exc`` when an exception is attached, and the ids in hand
(``singularity.ops.context``: request, run, cycle, being, task).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from singularity.ops import context


class ContextFilter(logging.Filter):
    """Copy the ids in hand onto the record (a record's own ``extra`` ids win)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in context.current().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in context.FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = str(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False, default=str)
