"""Work run by several threads at once, as parallel workers would (the concurrency tests on Postgres)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from django.db import connection

T = TypeVar("T")


def at_once(work: Callable[[], T], times: int = 2, *, timeout: float | None = None) -> list[T]:
    """Run ``work`` in ``times`` threads released together, each on its own database connection (closed after);
    return what they returned, in the order they finished. An error in a thread is raised here, not lost."""
    return each_at_once([work] * times, timeout=timeout)


def each_at_once(works: Sequence[Callable[[], T]], *, timeout: float | None = None) -> list[T]:
    """``at_once`` for different work: each of ``works`` in its own thread, all released together; return what they
    returned, in the order they finished. An error in a thread is raised here, not lost."""
    barrier = threading.Barrier(len(works))
    done: list[T] = []
    errors: list[BaseException] = []

    def run(work: Callable[[], T]) -> None:
        try:
            barrier.wait()
            done.append(work())
        except BaseException as exc:  # noqa: BLE001 - raised below, in the test's own thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(work,)) for work in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    if errors:
        raise errors[0]
    return done
