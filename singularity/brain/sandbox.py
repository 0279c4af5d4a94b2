"""Brain code in separate processes: a pool of sandbox children, each call under a deadline and a memory cap.

Every import and call of the brain's Python (``*.loop.py`` and its functions, ``CASES``, a pipeline's
``run``) happens in a child process (``sandbox_child.py``), never in the engine's own threads. The child
caps its address space (``BRAIN_CODE_MEMORY_MB``); the parent waits at most the deadline (an import
``BRAIN_IMPORT_DEADLINE_SECS``, a call its own) and on overrun kills the child and starts another. So a
module that spins at its top level, exits, or eats memory is one file's load error naming what it did
("did not finish importing within 10 s") — the caller goes on, and every other entity with it.

The parent keeps, per (file, hash), what the module holds (its manifest) or why it would not load: a module
is imported once per process of the pool, and a file that would not load is refused at once afterwards,
never waited on again. ``RemoteModule`` and ``RemoteFunction`` stand for the module and its functions in the
engine: ``getattr(module, "measure")`` is a function that, called, runs in the sandbox.

What a call hands brain code goes by value when it is plain data (numbers, text, dates, decimals, lists,
dicts, ``SimpleNamespace`` and dataclasses as namespaces) and by reference otherwise (a run's context, a
``ctx.gradedRuns`` callable): brain code reading or calling such a reference asks this process, which does
it in the caller's own thread (its database connection and transaction) and answers. Its answers come back
as plain data only; anything else fails the call naming the type.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import logging
import os
import pickle
import selectors
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from singularity.brain import sandbox_child as wire
from singularity.errors import ConfigError

log = logging.getLogger(__name__)

CHILD = Path(__file__).with_name("sandbox_child.py")


class SandboxError(ConfigError):
    """Brain code could not be run in the sandbox (the process died, exceeded its memory, answered non-data)."""


class LoadFailed(SandboxError):
    """A brain module would not load: its message names the file and what it did."""


class CallDeadline(SandboxError):
    """A call of brain code did not answer within its deadline; its process was killed."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class BrainRaised(Exception):  # noqa: N818 - named for what happened, as the brain's own exception stands for it
    """Base of the exceptions rebuilt from brain code (a class of the brain's own, by its name)."""


def _setting(name: str, default: float) -> float:
    from django.conf import settings

    return float(getattr(settings, name, default))


def import_deadline() -> float:
    return _setting("BRAIN_IMPORT_DEADLINE_SECS", 10.0)


def memory_cap_mb() -> int:
    return int(_setting("BRAIN_CODE_MEMORY_MB", 1024))


def pool_size() -> int:
    return max(1, int(_setting("BRAIN_SANDBOX_PROCESSES", 4)))


def _seconds(seconds: float) -> str:
    if seconds >= 120 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"


# --- one child ------------------------------------------------------------------------------------------------


class _Dead(Exception):
    """The child ended (or broke the conversation): ``why`` says how."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _Overrun(Exception):
    pass


class Child:
    """One sandbox process and the conversation with it."""

    def __init__(self) -> None:
        limit = memory_cap_mb() * 1024 * 1024
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONHASHSEED": "0",
        }
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and our own script
            [sys.executable, "-I", "-u", str(CHILD), str(limit), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        self.loaded: set[str] = set()
        self.broken = False
        self.memory_mb = memory_cap_mb()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.process.stdout, selectors.EVENT_READ)
        answer = self.receive(time.monotonic() + 30)
        if answer[0] != "ready":
            self.kill()
            raise SandboxError(f"the brain's sandbox did not start: it answered {answer[0]!r}")

    # -- frames --

    def send(self, payload: Any) -> None:
        try:
            wire.write_frame(self.process.stdin, payload)
        except (BrokenPipeError, OSError, ValueError) as exc:
            self.broken = True
            raise _Dead(self._ended()) from exc

    def _read(self, size: int, until: float) -> bytes:
        stream = self.process.stdout
        chunks = []
        while size:
            left = until - time.monotonic()
            if left <= 0 or not self._selector.select(left):
                raise _Overrun
            chunk = os.read(stream.fileno(), size)
            if not chunk:
                self.broken = True
                raise _Dead(self._ended())
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def receive(self, until: float) -> Any:
        (size,) = wire._HEADER.unpack(self._read(wire._HEADER.size, until))
        if size > wire.MAX_FRAME:
            self.broken = True
            raise _Dead(f"it answered a frame of {size} bytes, over the limit")
        data = self._read(size, until)
        try:
            return wire.safe_loads(data)
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
            self.broken = True
            raise _Dead(f"it answered something that is not plain data ({exc})") from exc

    def _ended(self) -> str:
        code = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = self.process.wait(timeout=1)
        if code is None:
            return "its process stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"its process was ended by {name}"
        return f"its process exited with code {code}"

    def kill(self) -> None:
        self.broken = True
        with contextlib.suppress(ProcessLookupError, OSError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.process.wait(timeout=5)
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError, ValueError):
                stream.close()
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.close()

    # -- a conversation: one request, callbacks served, until its answer --

    def converse(self, request: Any, until: float, refs: _Refs) -> Any:
        """Send ``request`` and return its answer, serving the child's callbacks meanwhile (in this thread)."""
        self.send(request)
        return self.next_answer(until, refs)

    def next_answer(self, until: float, refs: _Refs) -> Any:
        while True:
            message = self.receive(until)
            if message[0] != "cb":
                return message
            self.send(refs.serve(message))


class _Refs:
    """The parent's objects one call handed out by reference, and the exceptions its callbacks raised."""

    def __init__(self, source: _Source | None = None) -> None:
        self.objects: dict[int, Any] = {}
        self.errors: dict[int, BaseException] = {}
        self._ids = itertools.count(1)
        self.source = source

    def ref(self, value: Any) -> wire.Ref:
        for key, known in self.objects.items():
            if known is value:
                return wire.Ref(key)
        key = next(self._ids)
        self.objects[key] = value
        return wire.Ref(key)

    def outbound(self, value: Any, depth: int = 0) -> Any:
        """``value`` as it crosses to the child: plain data by value, everything else by reference."""
        if depth > 200:
            raise SandboxError("a value handed to brain code is nested more than 200 levels deep")
        if value is None or type(value) in (bool, int, float, str, bytes):
            return value
        for base in (bool, int, float, str, bytes):  # an enum's member or another subclass: its plain value
            if isinstance(value, base):
                return base(value)
        if isinstance(value, dict):
            return {self.outbound(k, depth + 1): self.outbound(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self.outbound(v, depth + 1) for v in value]
        if isinstance(value, tuple) and type(value) is tuple:
            return tuple(self.outbound(v, depth + 1) for v in value)
        if isinstance(value, set | frozenset):
            return {self.outbound(v, depth + 1) for v in value}
        if isinstance(value, types.SimpleNamespace):
            return types.SimpleNamespace(**{k: self.outbound(v, depth + 1) for k, v in vars(value).items()})
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: self.outbound(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
            return types.SimpleNamespace(**fields)
        if type(value).__module__ in ("datetime", "decimal", "uuid") and not callable(value):
            return value
        return self.ref(value)

    def inbound(self, value: Any) -> Any:
        """A value from the child, each ``Ref`` back to the parent's own object."""
        if isinstance(value, wire.Ref):
            if value.ref_id not in self.objects:
                raise SandboxError(f"brain code answered an engine object it was never handed (#{value.ref_id})")
            return self.objects[value.ref_id]
        if isinstance(value, dict):
            return {self.inbound(k): self.inbound(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.inbound(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.inbound(v) for v in value)
        if isinstance(value, types.SimpleNamespace):
            return types.SimpleNamespace(**{k: self.inbound(v) for k, v in vars(value).items()})
        return value

    def serve(self, message: tuple) -> tuple:
        """Answer one callback: an attribute read or a call of an object handed out by reference."""
        _, op, ref_id, *rest = message
        if op == "source":
            return ("cb_ok", self.sibling(rest[0]))
        try:
            target = self.objects[ref_id]
            if op == "getattr":
                (name,) = rest
                if not isinstance(name, str) or name.startswith("_"):
                    raise AttributeError(f"{type(target).__name__} has no public attribute {name!r}")
                value = getattr(target, name)
            elif op == "call":
                args, kwargs = rest
                value = target(*self.inbound(args), **self.inbound(kwargs))
            else:
                raise SandboxError(f"unknown callback {op!r}")
            return ("cb_ok", self.outbound(value))
        except Exception as exc:  # noqa: BLE001 - handed to brain code, which may catch it; kept to re-raise
            key = next(self._ids)
            self.errors[key] = exc
            info = wire.failure(exc)
            info["parent"] = key
            return ("cb_err", info)

    def sibling(self, relative: Any) -> bytes | None:
        """The bytes of a helper beside the running module (``import helper``), at its commit; None if none."""
        source = self.source
        if source is None or source.resolver is None or not isinstance(relative, str):
            return None
        directory, _, name = relative.rpartition("/")
        own = source.path.rpartition("/")[0]
        if directory != own or not name.endswith(".py") or not name[:-3].isidentifier():
            return None
        if name.endswith((".loop.py", ".pipeline.py")):
            return None
        return source.resolver(relative)


# --- the pool -------------------------------------------------------------------------------------------------


class _Pool:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.idle: list[Child] = []
        self.live = 0
        self.condition = threading.Condition()

    def acquire(self, until: float, what: str) -> Child:
        with self.condition:
            while True:
                while self.idle:
                    child = self.idle.pop()
                    if child.process.poll() is None and child.memory_mb == memory_cap_mb():
                        return child
                    self.live -= 1
                    child.kill()
                if self.live < pool_size():
                    self.live += 1
                    break
                left = until - time.monotonic()
                if left <= 0:
                    raise CallDeadline(
                        f"{what} not started: all {self.live} of the brain's sandbox processes stayed busy", 0
                    )
                self.condition.wait(left)
        try:
            return Child()
        except BaseException:
            with self.condition:
                self.live -= 1
                self.condition.notify()
            raise

    def release(self, child: Child) -> None:
        with self.condition:
            if child.broken or child.process.poll() is not None or self.live > pool_size():
                self.live -= 1
                child.kill()
            else:
                self.idle.append(child)
            self.condition.notify()

    def close(self) -> None:
        with self.condition:
            children, self.idle = self.idle, []
            self.live -= len(children)
        for child in children:
            child.kill()


_pool_lock = threading.Lock()
_pool: _Pool | None = None


def pool() -> _Pool:
    """This process's pool (a forked process starts its own: a parent's children are not its to talk to)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = _Pool()
        return _pool


@atexit.register
def shutdown() -> None:
    """End every idle sandbox process of this process's pool."""
    if _pool is not None and _pool.pid == os.getpid():
        _pool.close()


# --- modules --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Source:
    path: str
    sha: str
    source: bytes
    #: Reads a helper the module imports (a path beside it) at the module's commit: bytes, or None.
    resolver: Callable[[str], bytes | None] | None = dataclasses.field(default=None, compare=False)


_manifests: dict[str, dict[str, tuple]] = {}
_failures: dict[str, str] = {}
_key_locks: dict[str, threading.Lock] = {}
_meta_lock = threading.Lock()


def _key(path: str, sha: str) -> str:
    return f"{path}\0{sha}"


def _rebuild(info: dict, refs: _Refs | None) -> BaseException:
    """The brain's exception in the engine: a callback's own original, a builtin, or a class of its name."""
    parent = info.get("parent")
    if refs is not None and parent in refs.errors:
        return refs.errors[parent]
    import builtins

    cls = getattr(builtins, info.get("type", ""), None) if info.get("builtin") else None
    exc: BaseException
    if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "builtins":
        try:
            exc = cls(*(info.get("args") or (info.get("message", ""),)))
        except Exception:  # noqa: BLE001 - a builtin that will not take those args: its message stands
            exc = cls(info.get("message", ""))
    else:
        name = str(info.get("type") or "Exception")
        exc = type(name if name.isidentifier() else "BrainError", (BrainRaised,), {})(info.get("message", ""))
    exc.brain_frames = [tuple(frame) for frame in info.get("frames") or []]  # type: ignore[attr-defined]
    return exc


def _load_words(path: str, kind: str, info: dict) -> str:
    if kind == "exit":
        return f"{path}: exited while importing (SystemExit {info.get('message') or 0})"
    if kind == "memory":
        return f"{path}: exceeded its memory cap of {memory_cap_mb()} MB while importing"
    frames = info.get("frames") or []
    where = f" (line {frames[-1][1]})" if frames else ""
    return f"{path}: import failed: {info.get('type')}: {info.get('message')}{where}"


def _import_in(child: Child, source: _Source, until: float) -> dict[str, tuple]:
    """Import ``source`` in ``child``; its manifest, or LoadFailed naming what it did (the child killed on overrun)."""
    try:
        answer = child.converse(("load", source.sha, source.path, source.source), until, _Refs(source))
    except _Overrun:
        child.kill()
        raise LoadFailed(f"{source.path}: did not finish importing within {_seconds(import_deadline())}") from None
    except _Dead as dead:
        raise LoadFailed(f"{source.path}: {dead.why} while importing") from None
    if answer[0] == "ok":
        child.loaded.add(source.sha)
        return answer[1]
    _, kind, info = answer
    if kind in ("memory", "exit"):
        child.kill()
    raise LoadFailed(_load_words(source.path, kind, info))


def load(path: str, sha: str, source: bytes, *, resolver: Callable[[str], bytes | None] | None = None) -> RemoteModule:
    """Import the module in the sandbox once per (file, hash) and return it; LoadFailed naming what it did.

    ``resolver`` reads a helper the module imports (``import helper`` finds ``helper.py`` beside it), at the
    module's commit; a helper is imported once per sandbox process and kept (R3.34).
    """
    key = _key(path, sha)
    with _meta_lock:
        known = _manifests.get(key)
        if known is not None:
            return RemoteModule(_Source(path, sha, source, resolver), known)
        if key in _failures:
            raise LoadFailed(_failures[key])
        lock = _key_locks.setdefault(key, threading.Lock())
    with lock:  # threads asking for the same file wait for one import, never start their own
        with _meta_lock:
            if key in _manifests:
                return RemoteModule(_Source(path, sha, source, resolver), _manifests[key])
            if key in _failures:
                raise LoadFailed(_failures[key])
        src = _Source(path, sha, source, resolver)
        until = time.monotonic() + import_deadline()
        the_pool = pool()
        child = the_pool.acquire(until, f"{path}: import")
        try:
            manifest = _import_in(child, src, until)
        except LoadFailed as failed:
            with _meta_lock:
                _failures[key] = str(failed)
            log.warning("brain module refused: %s", failed)
            raise
        finally:
            the_pool.release(child)
        with _meta_lock:
            _manifests[key] = manifest
        return RemoteModule(src, manifest)


def forget() -> None:
    """Forget every manifest and load failure of this process (a test's clean slate)."""
    with _meta_lock:
        _manifests.clear()
        _failures.clear()


class RemoteModule:
    """A brain module imported in the sandbox: its functions are ``RemoteFunction``s, its data plain values."""

    def __init__(self, source: _Source, manifest: dict[str, tuple]) -> None:
        self._source = source
        self._manifest = manifest
        self.__file__ = f"<brain>/{source.path}"
        self.__name__ = source.path

    def __getattr__(self, name: str) -> Any:
        entry = self.__dict__["_manifest"].get(name)
        if entry is None:
            raise AttributeError(f"{self.__dict__['_source'].path} has no {name}")
        if entry[0] == "function":
            parameters = entry[2] if len(entry) > 2 else None
            return RemoteFunction(self._source, name, is_async=bool(entry[1]), parameters=parameters)
        return self.read(name)

    def read(self, name: str) -> Any:
        """The attribute's current value in a sandbox process (plain data), read there."""
        return _run(self._source, ("get", name), seconds=import_deadline(), label=f"{name}")

    def __dir__(self) -> list[str]:
        return sorted(self._manifest)

    def __repr__(self) -> str:
        return f"<brain module {self._source.path} {self._source.sha[:12]}>"


class RemoteFunction:
    """A function of a brain module, called in the sandbox under a deadline."""

    def __init__(
        self, source: _Source, name: str, *, is_async: bool, parameters: list[tuple[str, int, bool]] | None = None
    ) -> None:
        self.source = source
        self.__name__ = name
        self.__qualname__ = name
        self.__module__ = f"<brain>/{source.path}"
        self.is_async = is_async
        if parameters is not None:
            import inspect

            self.__signature__ = inspect.Signature(
                [
                    inspect.Parameter(
                        pname, inspect._ParameterKind(kind), default=None if has_default else inspect.Parameter.empty
                    )
                    for pname, kind, has_default in parameters
                ]
            )

    @property
    def path(self) -> str:
        return self.source.path

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from singularity.brain.deadline import deadline_seconds

        return self.call(args, kwargs, seconds=deadline_seconds())

    def call(self, args: Sequence[Any], kwargs: dict[str, Any], *, seconds: float) -> Any:
        """``function(*args, **kwargs)`` in the sandbox; CallDeadline past ``seconds``, its exception as raised."""
        return _run(self.source, ("call", self.__name__, tuple(args), dict(kwargs)), seconds=seconds)

    def call_each(
        self, arguments: Iterable[Sequence[Any]], *, seconds: float
    ) -> list[tuple[Any, BaseException | None]]:
        """One (value, error) pair per argument tuple, in one conversation, each call under its own deadline."""
        todo = [tuple(args) for args in arguments]
        if not todo:
            return []
        return _run_each(self.source, self.__name__, todo, seconds=seconds)

    def __repr__(self) -> str:
        return f"<brain function {self.source.path}: {self.__name__}()>"


def is_async(function: Any) -> bool:
    """Whether ``function`` is declared async (a brain function as its module declares it)."""
    import inspect

    if isinstance(function, RemoteFunction):
        return function.is_async
    return inspect.iscoroutinefunction(function)


def _words(kind: str, info: dict, path: str, name: str) -> str:
    if kind == "exit":
        return f"{path}: {name}() exited (SystemExit {info.get('message') or 0})"
    if kind == "memory":
        return f"{path}: {name}() exceeded its memory cap of {memory_cap_mb()} MB"
    if kind == "unplain":
        return f"{path}: {name}() answered something that is not JSON or plain data: {info.get('message')}"
    return f"{path}: {name}(): {info.get('message')}"


@contextlib.contextmanager
def _ready_child(source: _Source, name: str, seconds: float) -> Iterator[Child]:
    """A sandbox process with ``source`` imported, held for one conversation, handed back to the pool after.

    The import (in a process that has not imported the file yet) is under the import deadline; the call's own
    clock starts once the process is ready, so starting a process never eats a function's deadline.
    """
    the_pool = pool()
    child = the_pool.acquire(time.monotonic() + max(seconds, import_deadline()), f"{source.path}: {name}()")
    try:
        if source.sha not in child.loaded:
            try:
                _import_in(child, source, time.monotonic() + import_deadline())
            except LoadFailed as failed:
                raise SandboxError(str(failed)) from None
        yield child
    finally:
        the_pool.release(child)


def _answer_of(answer: tuple, refs: _Refs, source: _Source, name: str) -> Any:
    if answer[0] == "ok":
        return refs.inbound(answer[1])
    _, kind, info = answer
    if kind == "raised":
        raise _rebuild(info, refs)
    raise SandboxError(_words(kind, info, source.path, name))


def _run(source: _Source, request: tuple, *, seconds: float, label: str | None = None) -> Any:
    """Run one ``call`` or ``get`` of ``source`` in a sandbox process under ``seconds``."""
    from singularity.brain.deadline import BrainDeadline

    op, name, *rest = request
    refs = _Refs(source)
    with _ready_child(source, name, seconds) as child:
        if op == "call":
            args, kwargs = rest
            outbound = (refs.outbound(tuple(args)), {k: refs.outbound(v) for k, v in kwargs.items()})
            message: tuple = ("call", source.sha, source.path, None, name, *outbound)
        else:
            message = ("get", source.sha, source.path, None, name)
        try:
            answer = child.converse(message, time.monotonic() + seconds, refs)
        except _Overrun:
            child.kill()
            raise BrainDeadline(source.path, label or name, seconds) from None
        except _Dead as dead:
            raise SandboxError(f"{source.path}: {name}(): {dead.why}") from None
        if answer[0] == "err" and answer[1] in ("memory", "exit"):
            child.kill()  # what is left of it is not to be trusted with the next call
        return _answer_of(answer, refs, source, name)


def _run_each(
    source: _Source, name: str, todo: list[tuple], *, seconds: float
) -> list[tuple[Any, BaseException | None]]:
    from singularity.brain.deadline import BrainDeadline

    refs = _Refs(source)
    answers: list[tuple[Any, BaseException | None]] = []
    try:
        with _ready_child(source, name, seconds) as child:
            payload = [tuple(refs.outbound(a) for a in args) for args in todo]
            child.send(("each", source.sha, source.path, None, name, payload))
            while len(answers) < len(todo):
                # Each call's deadline counts from the answer before it: a frame of answers restarts the clock.
                try:
                    message = child.next_answer(time.monotonic() + seconds, refs)
                except _Overrun:
                    child.kill()
                    answers.append((None, BrainDeadline(source.path, name, seconds)))
                    break
                except _Dead as dead:
                    answers.append((None, SandboxError(f"{source.path}: {name}(): {dead.why}")))
                    break
                for _index, answer in message[1]:
                    if answer[0] == "err" and answer[1] in ("memory", "exit"):
                        child.broken = True
                    try:
                        answers.append((_answer_of(answer, refs, source, name), None))
                    except Exception as exc:  # noqa: BLE001 - this call's failure, handed back beside the others
                        answers.append((None, exc))
    except (SandboxError, _Dead) as exc:
        failed = exc if isinstance(exc, SandboxError) else SandboxError(f"{source.path}: {name}(): {exc.why}")
        return [(None, failed) for _ in todo]
    left = len(todo) - len(answers)
    if left:
        stopped = SandboxError(f"{source.path}: {name}() not called: an earlier call of the batch ended its process")
        answers.extend((None, stopped) for _ in range(left))
    return answers


def bounded_calls(function: Callable[..., Any]) -> bool:
    """Whether ``function`` keeps its own deadline (it runs in the sandbox)."""
    return isinstance(function, RemoteFunction)
