"""Keep the log to one line per thing that happened: Celery's INFO lines about routine ticks are dropped.

Beat sends ``wake_beings`` every two seconds and a dozen other sweeps on their
cadences; Celery writes "sending due task", "received" and "succeeded" for
each, burying real errors under hundreds of lines an hour. The tasks log
their own line when a tick did something (``singularity.tasks``). Any other
task gets one line, Celery's "succeeded", not also "received". Warnings and
errors about any task are always kept.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from celery.app.trace import LOG_RECEIVED

from singularity.schedule import BEAT_SCHEDULE

#: Tasks whose routine lines are dropped: every periodic task, and the cycle each woken being runs.
QUIET_TASKS = frozenset({entry["task"] for entry in BEAT_SCHEDULE.values()} | {"singularity.tasks.run_being_cycle"})
#: Beat names its entries ("wake-beings") as well as their tasks.
QUIET_NAMES = QUIET_TASKS | frozenset(BEAT_SCHEDULE)


class QuietPeriodicTicks(logging.Filter):
    """Drop records below WARNING that announce a task's receipt or name a quiet task or beat entry."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        if record.msg == LOG_RECEIVED:
            return False
        args = record.args
        values = args.values() if isinstance(args, Mapping) else (args or ())
        return not any(isinstance(value, str) and value in QUIET_NAMES for value in values)
