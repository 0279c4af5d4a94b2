"""The guard in front of ``/api/``: a bounded body, no NUL in the path or a query parameter, JSON for Django's answers.

A body longer than ``API_MAX_BODY_BYTES`` (its ``Content-Length``) is refused
before anything reads it: 413 ``too_large`` naming the size and the bound.

A NUL reaches Postgres as an error (text cannot hold U+0000), so it is refused
here, for every endpoint at once, as 400 ``invalid`` naming the parameter.
A query parameter the operation does not document is refused as 400 ``invalid`` naming it and what the
operation takes (``singularity.apikit.query``). What Django answers itself under ``/api/`` — an unknown path (404), a crash
(500, unless DEBUG shows its page) — is turned into the API's error shape, so
a script never has to read an HTML page.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from singularity.apikit.camel import camel
from singularity.apikit.query import unknown
from singularity.json_input import text_problem

PREFIX = "/api/"
#: Django's own error status → our code.
CODES = {404: "not_found", 405: "method_not_allowed", 500: "server_error"}


def _refusal(request: HttpRequest) -> str:
    """The first ``<name>: <why>`` about text in the path or the query string; "" when there is none."""
    if problem := text_problem(request.path_info):
        return f"path: {problem}"
    for name, values in request.GET.lists():
        for value in [name, *values]:
            if problem := text_problem(value):
                return f"{name[:60]}: {problem}"
    return ""


def _too_large(request: HttpRequest) -> JsonResponse | None:
    """413 (or 400 for a length that is not a number) when the body is over ``API_MAX_BODY_BYTES``; else None."""
    declared = request.META.get("CONTENT_LENGTH") or ""
    if not declared.strip():
        return None
    try:
        length = int(declared)
    except ValueError:
        return JsonResponse({"error": "invalid", "detail": "Content-Length: not a number of bytes"}, status=400)
    bound = int(settings.API_MAX_BODY_BYTES)
    if length <= bound:
        return None
    detail = f"body: {length:,} bytes is more than the API takes ({bound:,} bytes)"
    return JsonResponse({"error": "too_large", "detail": detail}, status=413)


def _is_json(response: HttpResponse) -> bool:
    kind = response.get("Content-Type", "")
    return kind.startswith("application/json") or "+json" in kind.split(";")[0]


def _detail(request: HttpRequest, status: int) -> str:
    if status == 404:
        return f"{request.path_info[:200]}: no such endpoint"
    if status == 405:
        return f'Method "{request.method}" not allowed.'
    if status >= 500:
        return "the server failed to answer; the error is logged"
    return HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "refused"


class ApiGuardMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path_info.startswith(PREFIX):
            return self.get_response(request)
        if (large := _too_large(request)) is not None:
            return large
        if refused := _refusal(request):
            return JsonResponse({"error": "invalid", "detail": refused}, status=400)
        response = self.get_response(request)
        status = response.status_code
        if status < 400 or _is_json(response) or (status >= 500 and settings.DEBUG):
            return response
        body = {"error": CODES.get(status, "error"), "detail": _detail(request, status)}
        replaced = HttpResponse(json.dumps(body), status=status, content_type="application/json")
        if allow := response.get("Allow"):
            replaced["Allow"] = allow
        return replaced

    def process_view(self, request: HttpRequest, view_func: Any, args: Any, kwargs: Any) -> HttpResponse | None:
        """A query parameter the operation's schema does not document is refused, never ignored (issue 36)."""
        if not request.path_info.startswith(PREFIX) or not request.GET:
            return None
        names = [camel(name) for name in request.GET]  # the schema's spelling (singularity.apikit.camel)
        if refused := unknown(view_func, request.method or "GET", names, request.path_info):
            return JsonResponse({"error": "invalid", "detail": refused}, status=400)
        return None
