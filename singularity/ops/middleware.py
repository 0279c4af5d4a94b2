"""Every request: an id (the caller's ``X-Request-ID`` when it is a sane one, else a new one), set for the logs and
answered back, and its latency observed by view and status (``singularity.ops.metrics``)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from singularity.ops import context, metrics

_SANE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def request_id(request: HttpRequest) -> str:
    """The caller's X-Request-ID when it is 1-64 of letters, digits, dot, dash, underscore; else a new one."""
    given = request.headers.get("X-Request-ID", "")
    return given if _SANE_ID.match(given) else uuid.uuid4().hex


def view_label(request: HttpRequest) -> str:
    """The view's URL name (a fixed set, never the path a caller typed): "unmatched" when none resolved."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "unmatched"
    return match.view_name or match._func_path  # noqa: SLF001 - Django's own dotted path of the view


class RequestContextMiddleware:
    """Sets the request id for the request's logs; observes its latency; answers the id in ``X-Request-ID``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        rid = request_id(request)
        started = time.perf_counter()
        # Set, not bound for the block: Django logs a 4xx/5xx ("django.request") after the middleware returns.
        # Cleared when the response is done (``request_finished``, singularity.ops.context.clear).
        context.set_ids(request_id=rid)
        response = self.get_response(request)
        metrics.observe_request(view_label(request), request.method or "", response.status_code, started)
        response["X-Request-ID"] = rid
        return response
