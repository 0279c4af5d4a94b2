"""What a log record knows of the work in hand: the request id, and the run, cycle or being id where one is.

Context variables, so each thread (a gunicorn thread, a Celery thread-pool
worker) and each task sees its own. ``bound(run_id=…)`` sets ids for a block.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

#: The ids a log record carries when they are in hand.
FIELDS = ("request_id", "run_id", "cycle_id", "being_id", "task_id")

_vars: dict[str, contextvars.ContextVar[str | None]] = {
    name: contextvars.ContextVar(f"singularity_{name}", default=None) for name in FIELDS
}


def current() -> dict[str, str]:
    """Every id set in this context, by field."""
    found = {}
    for name, var in _vars.items():
        value = var.get()
        if value is not None:
            found[name] = value
    return found


@contextlib.contextmanager
def bound(**ids: object) -> Iterator[None]:
    """Set the given ids (FIELDS) for the block, then restore what they were."""
    tokens = []
    for name, value in ids.items():
        if name not in _vars:
            raise ValueError(f"{name}: not a log context field (one of {', '.join(FIELDS)})")
        if value is not None:
            tokens.append((_vars[name], _vars[name].set(str(value))))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def set_ids(**ids: object) -> list[tuple[contextvars.ContextVar[str | None], contextvars.Token[str | None]]]:
    """Set ids until ``reset`` is called with what this returns (for signal pairs: task prerun/postrun)."""
    return [(_vars[name], _vars[name].set(str(value))) for name, value in ids.items() if value is not None]


def reset(tokens: list[tuple[contextvars.ContextVar[str | None], contextvars.Token[str | None]]]) -> None:
    """Undo ``set_ids``."""
    for var, token in reversed(tokens):
        var.reset(token)


def clear(**_: object) -> None:
    """Forget every id in this context (a request is done: ``request_finished``)."""
    for var in _vars.values():
        var.set(None)
