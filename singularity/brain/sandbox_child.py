"""The sandbox's child: a separate Python process that imports and calls the brain's code, and nothing else.

Run as a script (``python -I sandbox_child.py <memory-bytes>``) by ``singularity.brain.sandbox``; it
imports only the standard library (never Django or the project), caps its own address space with
``resource.setrlimit`` and then answers its parent's requests, one at a time, over its standard input and
output (its own ``print`` goes to standard error, so brain code cannot garble the conversation).

A request and an answer are frames: four bytes of length, then a pickle. What the parent sends is trusted
(it is the engine); what this process sends back is read by the parent through an unpickler that admits
only plain data (``safe_loads``), so values leaving the sandbox are made plain first (``plain``).

The requests:

- ``("load", sha, path, source)``: import the module (cached by its hash) and answer its manifest: each
  public name → ``("function", is_async)``, ``("data", value)`` or ``("object", type name)``.
- ``("call", sha, path, source or None, name, args, kwargs)``: call ``name`` of the module; ``source`` is
  sent when this process has not imported it yet.
- ``("each", sha, path, source or None, name, [args, …])``: the same call for each argument tuple, one
  ``("item", index, answer)`` frame an answer, so the parent's deadline is counted per call.
- ``("get", sha, path, source or None, name)``: a module attribute's current value.

While brain code runs it may use what the parent handed it by reference (``Ref``): an attribute read or a
call is a ``("cb", op, ref, …)`` frame to the parent, which answers ``("cb_ok", value)`` or
``("cb_err", failure)`` before anything else. A parent's exception comes back as an exception of the same
name here; if brain code lets it through, the parent raises its own original.

Not a security boundary: it keeps a module that spins, exits or eats memory from taking the engine's
process with it, and nothing more.
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime
import decimal
import importlib.util
import inspect
import io
import os
import pickle
import struct
import sys
import threading
import time
import traceback
import types
import uuid

#: The name both processes know this module by, so a ``Ref`` pickles the same way in each.
WIRE = "singularity_sandbox_wire"
sys.modules.setdefault(WIRE, sys.modules[__name__])

_HEADER = struct.Struct("!I")
#: The largest frame either side accepts (a brain's answer bigger than this is a failure, not a hang).
MAX_FRAME = 256 * 1024 * 1024


class Ref:
    """A parent's object handed to brain code by reference: its id in the parent's table for this call."""

    __module__ = WIRE

    def __init__(self, ref_id: int) -> None:
        self.ref_id = ref_id

    def __reduce__(self):  # noqa: ANN204 - pickled by id only
        return (Ref, (self.ref_id,))


class Unplain(TypeError):
    """A value brain code answered that cannot leave the sandbox as data."""


# --- frames ---------------------------------------------------------------------------------------------------


#: One frame at a time on a stream: a batch's sender thread and brain code's callbacks share the child's output.
_write_lock = threading.Lock()


def write_frame(stream: io.BufferedIOBase, payload: object) -> None:
    data = pickle.dumps(payload, protocol=5)
    with _write_lock:
        stream.write(_HEADER.pack(len(data)) + data)
        stream.flush()


def _read_exactly(stream: io.BufferedIOBase, size: int) -> bytes:
    chunks = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            raise EOFError("the other side closed the sandbox's pipe")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: io.BufferedIOBase) -> object:
    (size,) = _HEADER.unpack(_read_exactly(stream, _HEADER.size))
    if size > MAX_FRAME:
        raise EOFError(f"a frame of {size} bytes is over the sandbox's limit")
    return pickle.loads(_read_exactly(stream, size))  # noqa: S301 - the parent is the engine itself


_SAFE_CLASSES = {
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "complex"),
    ("builtins", "bytearray"),
    ("datetime", "datetime"),
    ("datetime", "date"),
    ("datetime", "time"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),
    ("decimal", "Decimal"),
    ("uuid", "UUID"),
    ("types", "SimpleNamespace"),
    ("collections", "OrderedDict"),
    (WIRE, "Ref"),
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # noqa: ANN201
        if (module, name) in _SAFE_CLASSES:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def safe_loads(data: bytes) -> object:
    """Unpickle what the child sent, admitting only plain data (the parent's side)."""
    return _SafeUnpickler(io.BytesIO(data)).load()


# --- values leaving the sandbox -------------------------------------------------------------------------------

_SCALARS = (type(None), bool, str, bytes, decimal.Decimal, datetime.date, datetime.time, datetime.timedelta, uuid.UUID)


def plain(value: object, depth: int = 0) -> object:
    """Return ``value`` as plain data (subclasses of int, float and str as their base type); Unplain otherwise."""
    if depth > 200:
        raise Unplain("nested more than 200 levels deep")
    if isinstance(value, Remote):
        return Ref(object.__getattribute__(value, "_ref_id"))
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, _SCALARS) and type(value).__module__ in ("builtins", "datetime", "decimal", "uuid"):
        return value
    if isinstance(value, datetime.timezone):
        return value
    if isinstance(value, dict):
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [plain(v, depth + 1) for v in value]
        return tuple(items) if isinstance(value, tuple) and type(value) is tuple else items
    if isinstance(value, set | frozenset):
        return {plain(v, depth + 1) for v in value}
    if isinstance(value, types.SimpleNamespace):
        return types.SimpleNamespace(**{k: plain(v, depth + 1) for k, v in vars(value).items()})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    item = getattr(value, "item", None)  # a NumPy scalar
    if callable(item) and type(value).__module__.startswith("numpy"):
        try:
            return plain(item(), depth + 1)
        except (TypeError, ValueError):
            pass
    tolist = getattr(value, "tolist", None)  # a NumPy array
    if callable(tolist) and type(value).__module__.startswith("numpy"):
        return plain(tolist(), depth + 1)
    raise Unplain(f"a {type(value).__module__}.{type(value).__qualname__}, which is not plain data")


def failure(exc: BaseException) -> dict:
    """Describe ``exc`` for the parent: its class name, message, builtin args and the brain's own frames."""
    cls = type(exc)
    args = None
    if cls.__module__ == "builtins":
        try:
            args = plain(exc.args)
            pickle.dumps(args)
        except Exception:  # noqa: BLE001 - an unpicklable argument: the parent rebuilds from the message
            args = None
    frames = [
        (frame.filename, frame.lineno, frame.name, frame.line or "")
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename.startswith("<brain>/")
    ]
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a __str__ that raises: the class name is all we can say
        message = ""
    return {
        "type": cls.__name__,
        "builtin": cls.__module__ == "builtins",
        "args": args,
        "message": message[:10_000],
        "frames": frames[-20:],
        "parent": getattr(exc, "_sandbox_parent_exc", None),
    }


# --- the parent's objects, seen from here ---------------------------------------------------------------------

_channel: dict[str, object] = {}


def _callback(op: str, ref_id: int, *rest: object) -> object:
    write_frame(_channel["out"], ("cb", op, ref_id, *rest))
    answer = read_frame(_channel["in"])
    if answer[0] == "cb_ok":
        return _inbound(answer[1])
    raise _rebuild(answer[1])


_rebuilt: dict[str, type] = {}


def _rebuild(info: dict) -> BaseException:
    """An exception of the parent's, as brain code can catch it: the builtin class, or one of the same name."""
    cls = getattr(builtins, info["type"], None) if info.get("builtin") else None
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            exc = cls(*(info.get("args") or (info["message"],)))
        except Exception:  # noqa: BLE001 - a builtin that will not take those args: its message stands
            exc = cls(info["message"])
    else:
        cls = _rebuilt.get(info["type"])
        if cls is None:
            cls = _rebuilt[info["type"]] = type(info["type"], (Exception,), {})
        exc = cls(info["message"])
    exc._sandbox_parent_exc = info.get("parent")
    return exc


class Remote:
    """A parent's object: reading an attribute or calling it asks the parent."""

    __slots__ = ("_ref_id", "_label")

    def __init__(self, ref_id: int, label: str = "") -> None:
        object.__setattr__(self, "_ref_id", ref_id)
        object.__setattr__(self, "_label", label)

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return _callback("getattr", object.__getattribute__(self, "_ref_id"), name)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return _callback("call", object.__getattribute__(self, "_ref_id"), plain(args), plain(kwargs))

    def __repr__(self) -> str:
        return f"<engine object {object.__getattribute__(self, '_label') or object.__getattribute__(self, '_ref_id')}>"


def _inbound(value: object) -> object:
    """A value from the parent, with each ``Ref`` made a ``Remote``."""
    if isinstance(value, Ref):
        return Remote(value.ref_id)
    if isinstance(value, dict):
        return {k: _inbound(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_inbound(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_inbound(v) for v in value)
    if isinstance(value, types.SimpleNamespace):
        return types.SimpleNamespace(**{k: _inbound(v) for k, v in vars(value).items()})
    return value


# --- modules --------------------------------------------------------------------------------------------------

_modules: dict[str, types.ModuleType] = {}
#: The brain directory whose code runs now: where ``import helper`` looks for ``helper.py`` beside it.
_running: dict[str, str | None] = {"dir": None}


class _Siblings:
    """Finds ``import helper`` in the brain: ``helper.py`` beside the running module, at its commit, asked of the
    parent. Last on ``sys.meta_path`` (the standard library and installed packages answer first); a helper is
    imported once and kept for the life of this process, as the seed says of a loop module's siblings."""

    def find_spec(self, name: str, path: object = None, target: object = None):  # noqa: ANN201

        directory = _running["dir"]
        if path is not None or "." in name or directory is None:
            return None
        relative = f"{directory}/{name}.py" if directory else f"{name}.py"
        source = _callback("source", 0, relative)
        if not isinstance(source, bytes):
            return None
        spec = importlib.util.spec_from_loader(name, self, origin=f"<brain>/{relative}")
        spec.loader_state = (relative, source)
        return spec

    def create_module(self, spec: object) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        relative, source = module.__spec__.loader_state
        module.__file__ = f"<brain>/{relative}"
        exec(compile(source, module.__file__, "exec", dont_inherit=True), module.__dict__)  # noqa: S102


def _directory(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


class _InDirectory:
    """Within it, ``import helper`` resolves beside ``path``."""

    def __init__(self, path: str) -> None:
        self.directory = _directory(path)

    def __enter__(self) -> None:
        self.before = _running["dir"]
        _running["dir"] = self.directory

    def __exit__(self, *exc: object) -> None:
        _running["dir"] = self.before


def _import(sha: str, path: str, source: bytes | None) -> types.ModuleType:
    module = _modules.get(sha)
    if module is not None:
        return module
    if source is None:
        raise LookupError(f"{path} is not imported in this process and no source came with the call")
    name = "brain_" + path.replace("/", "_").replace(".", "_").replace("-", "_") + "_" + sha[:12]
    module = types.ModuleType(name)
    module.__file__ = f"<brain>/{path}"
    sys.modules[name] = module  # before it runs, as an import does, so dataclasses and pickling find it
    try:
        with _InDirectory(path):
            exec(compile(source, module.__file__, "exec", dont_inherit=True), module.__dict__)  # noqa: S102
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _modules[sha] = module
    return module


def _parameters(function: object) -> list[tuple[str, int, bool]] | None:
    """The function's parameters as (name, kind, has a default), or None when it has no readable signature."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    return [(p.name, int(p.kind), p.default is not p.empty) for p in signature.parameters.values()]


def manifest(module: types.ModuleType) -> dict[str, tuple]:
    """Each public name of ``module``: a function (and whether it is async), plain data, or another object."""
    out: dict[str, tuple] = {}
    for key, value in vars(module).items():
        if key.startswith("__") or isinstance(value, types.ModuleType):
            continue
        if callable(value):
            out[key] = ("function", inspect.iscoroutinefunction(value), _parameters(value))
            continue
        try:
            out[key] = ("data", plain(value))
        except Unplain:
            out[key] = ("object", type(value).__name__)
    return out


def _call(function: object, args: tuple, kwargs: dict) -> object:
    answer = function(*_inbound(args), **_inbound(kwargs))
    if inspect.iscoroutine(answer):
        import asyncio

        answer = asyncio.run(answer)
    return plain(answer)


def _answer(out: io.BufferedIOBase, tag: str, *rest: object) -> None:
    write_frame(out, (tag, *rest))


def _guarded(fn, *args: object) -> tuple:  # noqa: ANN001
    """Run ``fn(*args)``; the answer frame's body: ("ok", value) or ("err", kind, failure)."""
    try:
        return ("ok", fn(*args))
    except SystemExit as exc:
        return ("err", "exit", {"type": "SystemExit", "message": str(exc.code), "frames": [], "builtin": True})
    except MemoryError as exc:
        return ("err", "memory", failure(exc))
    except Unplain as exc:
        return ("err", "unplain", failure(exc))
    except RecursionError as exc:
        return ("err", "raised", failure(exc))
    except BaseException as exc:  # noqa: BLE001 - the brain's failure, described for the parent
        return ("err", "raised", failure(exc))


def _load(sha: str, path: str, source: bytes | None) -> dict:
    return manifest(_import(sha, path, source))


def _call_named(sha: str, path: str, source: bytes | None, name: str, args: tuple, kwargs: dict) -> object:
    with _InDirectory(path):
        return _call(getattr(_import(sha, path, source), name), args, kwargs)


def _function(sha: str, path: str, source: bytes | None, name: str) -> object:
    return getattr(_import(sha, path, source), name)


def _get(sha: str, path: str, source: bytes | None, name: str) -> object:
    return plain(getattr(_import(sha, path, source), name))


#: How often a batch's answers so far are sent (a frame a call cost more than the call of a small function).
FLUSH_SECS = 0.002


def _each(out: io.BufferedIOBase, where: list, batch: list) -> None:
    """Answer a batch: each call's answer kept as it comes, sent by a thread every ``FLUSH_SECS`` as one ``items``
    frame — so a call that hangs still lets the parent see every answer before it (and count its deadline from
    the last one), and a fast batch costs a few frames, not one a call."""
    pending: list[tuple[int, tuple]] = []
    lock = threading.Lock()
    finished = threading.Event()

    def flush() -> None:
        with lock:
            ready = pending[:]
            del pending[:]
        if ready:
            write_frame(out, ("items", ready))

    def sender() -> None:
        while not finished.wait(FLUSH_SECS):
            flush()

    thread = threading.Thread(target=sender, daemon=True, name="batch-sender")
    thread.start()
    try:
        loaded = _guarded(_function, *where)
        for index, args in enumerate(batch):
            if loaded[0] != "ok":
                answer = loaded
            else:
                with _InDirectory(where[1]):
                    answer = _guarded(_call, loaded[1], args, {})
            with lock:
                pending.append((index, answer))
    finally:
        finished.set()
        thread.join()
        flush()


def serve(inp: io.BufferedIOBase, out: io.BufferedIOBase) -> None:
    _channel["in"], _channel["out"] = inp, out
    while True:
        try:
            request = read_frame(inp)
        except EOFError:
            return
        op, *rest = request
        if op == "load":
            _answer(out, *_guarded(_load, *rest))
        elif op == "call":
            _answer(out, *_guarded(_call_named, *rest))
        elif op == "each":
            *where, batch = rest
            _each(out, where, batch)
        elif op == "get":
            _answer(out, *_guarded(_get, *rest))
        elif op == "ping":
            _answer(out, "ok", os.getpid())
        else:
            _answer(out, "err", "protocol", {"type": "ValueError", "message": f"unknown request {op!r}", "frames": []})


def _watch_parent(parent: int) -> None:
    """End this process when its parent is gone (brain code that spins never reads the closed pipe)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(70)


def main() -> None:
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    parent = int(sys.argv[2]) if len(sys.argv) > 2 else os.getppid()
    # The conversation keeps the original descriptors; brain code's print and input get stderr and nothing.
    inp = os.fdopen(os.dup(0), "rb", buffering=0)
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="parent-watch").start()
    sys.meta_path.append(_Siblings())
    if limit > 0:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    write_frame(out, ("ready", os.getpid()))
    serve(inp, out)


if __name__ == "__main__":
    main()
