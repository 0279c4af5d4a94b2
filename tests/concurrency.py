"""Work run by several threads at once, as parallel workers would (the concurrency tests on Postgres)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connection

T = TypeVar("T")


def at_once(work: Callable[[], T], times: int = 2, *, timeout: float | None = None) -> list[T]:
    """Run ``work`` in ``times`` threads released together, each on its own database connection (closed after);
    return what they returned, in the order they finished. An error in a thread is raised here, not lost."""
    barrier = threading.Barrier(times)
    done: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait()
            done.append(work())
        except BaseException as exc:  # noqa: BLE001 - raised below, in the test's own thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    if errors:
        raise errors[0]
    return done
