"""Brain code called with a deadline: in the sandbox for the brain's own, in a thread the caller can abandon for
the project's callables, and the timeout as that function's error.

A function of a brain module (``singularity.brain.sandbox.RemoteFunction``, what ``load_at`` hands out) runs
in the brain's sandbox, whose process is killed and replaced past the deadline: ``call``, ``call_each`` and
``bounded`` hand it there. What follows is how the rest (a project's ``LOOP_*`` callables, which are the
engine's own code) is bounded.

A brain's own functions (``should_open``, ``window``, ``compare``,
``verdict``, ``measure``, a proposer pipeline's ``run``) are the brain's
code, and code can hang. ``call`` runs one in a daemon thread and waits
at most its deadline (``BRAIN_CODE_DEADLINE_SECS``, 60 s — the seed's
limit for window() and compare, held for every function); past it the
caller goes on with ``BrainDeadline``, whose message names the file and the
function ("features/x.loop.py: window() did not answer within 60 s"), and
the thread is left to finish on its own. Nothing the thread does afterwards
reaches the caller: its answer is dropped.

A function whose abandoned call is still running is not started again —
the next call refuses at once with the same sentence (so a hung ``window``
costs one deadline, not one per tick), and no more than
``MAX_ABANDONED`` abandoned calls are ever left running in one process.

The thread has its own database connection (Django's, per thread), closed
when the function returns, so an abandoned call can never touch the
caller's connection or its transaction.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from singularity.errors import ConfigError

#: How many abandoned calls may still be running in one process before brain code is refused outright.
MAX_ABANDONED = 16

_lock = threading.Lock()
#: The key of each function with an abandoned call still running → that call's thread.
_abandoned: dict[str, threading.Thread] = {}


class BrainDeadline(ConfigError):
    """Brain code did not answer within its deadline; the message names the file and the function."""

    def __init__(self, path: str, name: str, seconds: float, *, still_running: bool = False) -> None:
        sentence = f"{path}: {name}() did not answer within {format_seconds(seconds)}"
        if still_running:
            sentence += " (its last call is still running; it is not started again until that one ends)"
        super().__init__(sentence)
        self.path = path
        self.name = name
        self.seconds = seconds


def format_seconds(seconds: float) -> str:
    """Return ``seconds`` as a person reads a deadline: "60 s", "0.2 s", "10 min"."""
    if seconds >= 120 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"


def deadline_seconds() -> float:
    """Return the deadline brain code runs under (``BRAIN_CODE_DEADLINE_SECS``, 60 s by default)."""
    return float(getattr(settings, "BRAIN_CODE_DEADLINE_SECS", 60.0))


@dataclass
class _Outcome:
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None


def _key(function: Callable[..., Any], path: str, name: str) -> str:
    module = getattr(function, "__module__", "") or ""
    qualname = getattr(function, "__qualname__", "") or name
    return f"{path}\0{name}\0{module}\0{qualname}"


def _reap() -> None:
    """Forget abandoned calls that have ended (called with ``_lock`` held)."""
    for key in [key for key, thread in _abandoned.items() if not thread.is_alive()]:
        del _abandoned[key]


def still_running() -> int:
    """Return how many abandoned calls of brain code are still running in this process."""
    with _lock:
        _reap()
        return len(_abandoned)


def call(
    function: Callable[..., Any],
    *args: Any,
    path: str,
    name: str | None = None,
    seconds: float | None = None,
    **kwargs: Any,
) -> Any:
    """Return ``function(*args, **kwargs)`` run with a deadline; BrainDeadline naming ``path`` and ``name`` past it.

    Whatever the function raises is raised here unchanged. ``seconds`` is
    the deadline (``BRAIN_CODE_DEADLINE_SECS`` when None).
    """
    name = name or getattr(function, "__name__", "function")
    limit = deadline_seconds() if seconds is None else float(seconds)
    from singularity.brain.sandbox import RemoteFunction

    if isinstance(function, RemoteFunction):
        return function.call(args, kwargs, seconds=limit)
    key = _key(function, path, name)
    with _lock:
        _reap()
        if key in _abandoned:
            raise BrainDeadline(path, name, limit, still_running=True)
        if len(_abandoned) >= MAX_ABANDONED:
            raise ConfigError(
                f"{path}: {name}() not started: {len(_abandoned)} calls of the brain's code are still running "
                "past their deadline in this process"
            )
    outcome = _Outcome()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            outcome.value = context.run(function, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it was raised
            outcome.error = exc
        finally:
            from django.db import connections

            connections.close_all()
            outcome.done.set()

    thread = threading.Thread(target=run, name=f"brain {path}: {name}()", daemon=True)
    thread.start()
    if not outcome.done.wait(limit):
        with _lock:
            if thread.is_alive():
                _abandoned[key] = thread
        raise BrainDeadline(path, name, limit)
    if outcome.error is not None:
        raise outcome.error
    return outcome.value


def call_each(
    function: Callable[..., Any],
    arguments: Iterable[Sequence[Any]],
    *,
    path: str,
    name: str | None = None,
    seconds: float | None = None,
) -> list[tuple[Any, BaseException | None]]:
    """``call`` for a batch: ``function(*args)`` for each ``args`` of ``arguments``, in order, in one thread.

    Returns a (value, error) pair per call: what it returned, or what it raised (error None when it returned).
    Each call has its own deadline, counted from the end of the one before; a call past it is that call's
    ``BrainDeadline``, the thread is abandoned as ``call`` abandons one, and the calls after it are refused with
    "still running" without being started, as ``call`` would refuse them one by one. One thread for the batch
    rather than one a call: starting a thread and handing its answer back cost a thousand times the call of a
    small ``measure()``. The thread's database connection is closed when its last call returns.
    """
    name = name or getattr(function, "__name__", "function")
    limit = deadline_seconds() if seconds is None else float(seconds)
    from singularity.brain.sandbox import RemoteFunction

    if isinstance(function, RemoteFunction):
        return function.call_each(arguments, seconds=limit)
    key = _key(function, path, name)
    todo = [tuple(args) for args in arguments]
    if not todo:
        return []
    with _lock:
        _reap()
        if key in _abandoned:
            return [(None, BrainDeadline(path, name, limit, still_running=True)) for _ in todo]
        if len(_abandoned) >= MAX_ABANDONED:
            refused = ConfigError(
                f"{path}: {name}() not started: {len(_abandoned)} calls of the brain's code are still running "
                "past their deadline in this process"
            )
            return [(None, refused) for _ in todo]
    outcomes = [_Outcome() for _ in todo]
    stop = threading.Event()
    context = contextvars.copy_context()

    def run() -> None:
        from django.db import connections

        last = len(todo) - 1
        for index, (args, outcome) in enumerate(zip(todo, outcomes, strict=True)):
            if stop.is_set():
                connections.close_all()
                return
            try:
                outcome.value = context.run(function, *args)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller as it was raised
                outcome.error = exc
            finally:
                if index == last:
                    connections.close_all()  # before the last answer is handed back, as ``call`` closes it
                outcome.done.set()

    thread = threading.Thread(target=run, name=f"brain {path}: {name}() x{len(todo)}", daemon=True)
    thread.start()
    answers: list[tuple[Any, BaseException | None]] = []
    for outcome in outcomes:
        if not outcome.done.wait(limit):
            stop.set()
            with _lock:
                if thread.is_alive():
                    _abandoned[key] = thread
            answers.append((None, BrainDeadline(path, name, limit)))
            left = len(todo) - len(answers)
            answers.extend((None, BrainDeadline(path, name, limit, still_running=True)) for _ in range(left))
            return answers
        answers.append((outcome.value, outcome.error))
    return answers


def bounded(function: Callable[..., Any], *, path: str, name: str | None = None) -> Callable[..., Any]:
    """Return ``function`` wrapped so every call goes through ``call`` (an async function is returned as it is)."""
    import inspect

    from singularity.brain.sandbox import RemoteFunction

    if isinstance(function, RemoteFunction) or inspect.iscoroutinefunction(function):
        return function  # the sandbox keeps a brain function's deadline itself
    label = name or getattr(function, "__name__", "function")

    def under_deadline(*args: Any, **kwargs: Any) -> Any:
        return call(function, *args, path=path, name=label, **kwargs)

    under_deadline.__name__ = label
    under_deadline.__qualname__ = getattr(function, "__qualname__", label)
    under_deadline.__wrapped__ = function  # type: ignore[attr-defined]
    return under_deadline
