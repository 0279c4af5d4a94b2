"""Every query parameter an API operation takes is in its schema; any other is refused (issue 36).

A list that silently ignores ``?offset=2`` or ``?feature=x`` answers a question the caller did not ask (lists
page by ``cursor``: an ``offset`` is refused saying so). The
documented parameters of every operation are read once a process from the OpenAPI schema the API serves
(drf-spectacular, the same document a client is generated from), keyed by the view's class and the method, so
what the schema says and what the API takes cannot drift apart: an undocumented parameter is a 400 naming it
and the ones the operation takes. A view the schema does not list (the schema and docs pages) is not checked.
"""

from __future__ import annotations

import threading
from typing import Any

#: (view class, METHOD) → the query parameter names its operation documents; built on first use.
_TAKES: dict[tuple[type, str], frozenset[str]] | None = None
_LOCK = threading.Lock()


def _build() -> dict[tuple[type, str], frozenset[str]]:
    from drf_spectacular.generators import SchemaGenerator

    generator = SchemaGenerator()
    schema = generator.get_schema(request=None, public=True)
    takes: dict[tuple[type, str], frozenset[str]] = {}
    paths = schema.get("paths", {})
    for path, _regex, method, view in generator.endpoints:
        operation = paths.get(path, {}).get(method.lower())
        if operation is None:
            continue
        names = frozenset(p["name"] for p in operation.get("parameters", []) if p.get("in") == "query")
        takes[(view.cls, method.upper())] = names
    return takes


def documented(view_class: type, method: str) -> frozenset[str] | None:
    """The query parameters ``method`` on ``view_class`` documents; None for a view the schema does not list."""
    global _TAKES
    if _TAKES is None:
        with _LOCK:
            if _TAKES is None:
                _TAKES = _build()
    return _TAKES.get((view_class, method.upper()))


def warm() -> int:
    """Read the schema now (gunicorn's master calls it before forking, so no worker's first request pays for it).

    Returns how many operations were read.
    """
    documented(object, "GET")
    return len(_TAKES or {})


def unknown(view_func: Any, method: str, names: list[str], path: str) -> str:
    """ "<name>: not a parameter of GET /api/runs/ (it takes cursor, limit)" for the first name the operation does
    not document; "" when every name is documented or the view is not an API operation."""
    view_class = getattr(view_func, "cls", None)
    if view_class is None or not names or method.upper() in ("HEAD", "OPTIONS"):
        return ""
    takes = documented(view_class, "GET" if method.upper() == "HEAD" else method)
    if takes is None:
        return ""
    for name in names:
        if name not in takes:
            listed = ", ".join(sorted(takes)) if takes else "no query parameter"
            if name == "offset" and "cursor" in takes:
                return (
                    f"offset: lists page by cursor, not offset: pass cursor (a previous answer's nextCursor) "
                    f"instead to {method.upper()} {path[:200]} (it takes {listed})"
                )
            return f"{name[:60]}: not a parameter of {method.upper()} {path[:200]} (it takes {listed})"
    return ""
