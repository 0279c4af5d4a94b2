"""A memo that lives for one batch of bookings or gradings, for the hooks grading asks per run.

``on_terminal_many`` and ``grade_many`` ask registered hooks (the loop's
sampling exemption, its frozen judge) once per run; a hook that reads the
database keeps what it read for the rest of the batch in ``memo()`` so a
batch costs it one read per entity, not one per run. Outside a batch
``memo()`` is None and hooks read afresh.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_memo: ContextVar[dict[Any, Any] | None] = ContextVar("grading_batch_memo", default=None)


@contextmanager
def batch() -> Iterator[dict[Any, Any]]:
    """Open a memo for the duration of a batch (nested batches share the outer one)."""
    current = _memo.get()
    if current is not None:
        yield current
        return
    token = _memo.set({})
    try:
        yield _memo.get() or {}
    finally:
        _memo.reset(token)


def memo() -> dict[Any, Any] | None:
    """The current batch's memo, or None outside a batch."""
    return _memo.get()
