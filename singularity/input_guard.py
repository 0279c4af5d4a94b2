"""The site's first middleware: a request whose framing or text no view can use is refused 400, naming what.

- ``Content-Length`` must be a number of bytes (digits only, RFC 9110): Django
  reads it with ``int()`` and answered 500 to ``abc``; a negative length reached
  the form parsers. This holds for every path, the API's (answered in its
  ``{"error", "detail"}`` shape) and the pages'.
- On the pages (everything outside ``/api/``, which has its own guard and JSON
  parsers), the path, every query parameter and every posted form field — name
  and value — must be text both databases can hold: no NUL (Postgres refuses
  U+0000 in text) and no lone surrogate. One check here rather than one per view:
  any view, the admin's included, that hands a parameter to a query is covered.

A refusal is plain text, ``<name>: <why>``, so a form, a script and a person
all read the same sentence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict

from singularity.json_input import text_problem

API_PREFIX = "/api/"
#: The form encodings whose fields Django parses into ``request.POST``.
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
_LENGTH = re.compile(r"[0-9]+")


def length_problem(declared: str) -> str:
    """Why a declared ``Content-Length`` is no length ("" when it is one, or absent)."""
    if declared == "" or _LENGTH.fullmatch(declared):
        return ""
    return "Content-Length: not a number of bytes"


def _first_problem(params: QueryDict) -> str:
    for key, values in params.lists():
        for value in [key, *values]:
            if problem := text_problem(value):
                return f"{key[:60]}: {problem}"
    return ""


def _files(request: HttpRequest) -> Iterable[str]:
    for key, uploads in request.FILES.lists():
        yield key
        for upload in uploads:
            yield upload.name or ""


def text_refusal(request: HttpRequest) -> str:
    """The first ``<name>: <why>`` about the path, a query parameter or a posted form field; "" when all is text."""
    if problem := text_problem(request.path_info):
        return f"path: {problem}"
    if problem := _first_problem(request.GET):
        return problem
    if request.method == "POST" and request.content_type in FORM_TYPES:
        # Buffered first, so a view that reads the raw body after the guard (a webhook) still can: multipart is
        # otherwise parsed off the stream. Bounded by DATA_UPLOAD_MAX_MEMORY_SIZE (past it: 400); no page uploads.
        request.body  # noqa: B018
        if problem := _first_problem(request.POST):
            return problem
        for name in _files(request):
            if problem := text_problem(name):
                return f"file: {problem}"
    return ""


class InputGuardMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        api = request.path_info.startswith(API_PREFIX)
        if problem := length_problem(request.META.get("CONTENT_LENGTH") or ""):
            return _refused(problem, api=api)
        if not api and (problem := text_refusal(request)):
            return _refused(problem, api=False)
        return self.get_response(request)


def _refused(detail: str, *, api: bool) -> HttpResponse:
    if api:
        return JsonResponse({"error": "invalid", "detail": detail}, status=400)
    return HttpResponse(detail, status=400, content_type="text/plain; charset=utf-8")
