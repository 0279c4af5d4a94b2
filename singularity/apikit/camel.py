"""One spelling across ``/api/``: camelCase in requests and responses, snake_case inside (issue 36).

The seed's tool contracts are camelCase (``targetKind``, ``nextCursor``, ``needsYou``) and CONFORMANCE reads
them by those names, so the whole API speaks camelCase. One mechanism does it, from the maintained
``djangorestframework-camel-case``: the renderer camelizes every answer's keys (the library's rule, each
name's spelling cached), the parser turns a body's keys
to snake_case before a serializer sees it, ``CamelQueryMiddleware`` does the same to query parameter names, and
drf-spectacular's contrib hook (plus ``camelize_query_parameters`` here) shows the camelCase names in
``/api/schema/``. Serializers and views keep Python's snake_case names.

Keys that are data, not field names, keep their spelling both ways: every value under a field named in
``DATA_FIELDS`` (settings ``JSON_CAMEL_CASE["JSON_UNDERSCOREIZE"]["ignore_fields"]``) passes verbatim — metric
names (``resolution_rate``), span attributes (``gen_ai.usage.input_tokens``), judge outputs, stored records,
free-form JSON a user sent, settings values, file paths.

Deprecation: until ``SUNSET`` a snake_case key in a body or a query parameter where a camelCase spelling
exists is still read, and the answer says so: ``Deprecation`` (RFC 9745), ``Sunset`` (RFC 8594) and one
``Warning: 299 - "<old> is deprecated: spell it <new>"`` per old key. A camelCase request gets none of them.
After ``SUNSET`` such a request is refused, 400 ``invalid`` naming the first old key and its new spelling,
and nothing it asked for is done: the ``Sunset`` header said so for six months.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.utils.encoding import force_str
from django.utils.functional import Promise
from djangorestframework_camel_case.settings import api_settings as camel_settings
from djangorestframework_camel_case.util import camelize_re, underscore_to_camel, underscoreize
from rest_framework.exceptions import ParseError
from rest_framework.renderers import JSONRenderer

from singularity.apikit.camel_fields import DATA_FIELDS  # noqa: F401 - settings read it; tests name it here
from singularity.apikit.parsers import StrictJSONParser

PREFIX = "/api/"
#: Where the camelCase switch came in (the ``Deprecation`` header's date) and when snake_case stops being read.
DEPRECATED_SINCE = datetime(2026, 12, 7, tzinfo=UTC)
SUNSET = datetime(2027, 6, 30, 23, 59, 59, tzinfo=UTC)
#: The attribute of Django's request that collects the old spellings a request used (body and query).
OLD_SPELLINGS = "api_old_spellings"


@functools.lru_cache(maxsize=8192)
def camel(name: str) -> str:
    """``target_kind`` → ``targetKind``: the library's own rule, for one name (kept: an API has few names)."""
    return re.sub(camelize_re, underscore_to_camel, name) if "_" in name else name


#: Values the walk hands back as they are, told by their exact type (a ``str`` subclass may be a lazy ``Promise``).
_LEAVES = frozenset({str, int, float, bool, type(None)})


def camelize(data: Any, ignore: frozenset[str]) -> Any:
    """The library's ``camelize`` (ignore_fields only), with each name's spelling computed once a process.

    The library runs a regex over every key of every row: some 0.3 ms a row of twenty fields, which a
    200-row page pays 200 times. The answer is the same (``test_api_camel`` holds it to the library's).
    """
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if type(key) is not str and isinstance(key, Promise):
                key = force_str(key)
            new = camel(key) if isinstance(key, str) else key
            if type(value) in _LEAVES or key in ignore or new in ignore:  # a leaf is itself (the walk's last line)
                out[new] = value
            else:
                out[new] = camelize(value, ignore)
        return out
    if isinstance(data, (list, tuple)):
        return [camelize(item, ignore) for item in data]
    if isinstance(data, Promise):
        return force_str(data)
    if isinstance(data, (str, bytes)) or not hasattr(data, "__iter__"):
        return data
    return [camelize(item, ignore) for item in data]


def _options() -> dict[str, Any]:
    return camel_settings.JSON_UNDERSCOREIZE


def old_spellings(data: Any, ignore: Iterable[str] | None = None) -> list[str]:
    """The snake_case keys in ``data`` that have a camelCase spelling, outside the data fields, in order met."""
    ignore = tuple(ignore if ignore is not None else (_options().get("ignore_fields") or ()))
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                if isinstance(key, str) and camel(key) != key and key not in found:
                    found.append(key)
                if not (isinstance(key, str) and (key in ignore or camel(key) in ignore or _snake(key) in ignore)):
                    walk(inner)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(data)
    return found


def retired(names: list[str]) -> str | None:
    """After ``SUNSET``, the refusal of a request that used the old spellings ``names``; None before, or if none."""
    if not names or timezone.now() <= SUNSET:
        return None
    when = f"{SUNSET:%d %B %Y}".lstrip("0")
    return f"{names[0]}: the snake_case spelling was retired on {when}; spell it {camel(names[0])}"


def _snake(name: str) -> str:
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def _remember(request: Any, names: list[str]) -> None:
    """Add ``names`` to the old spellings Django's request carries (``request`` may be DRF's)."""
    if not names:
        return
    django_request = getattr(request, "_request", request)
    seen = getattr(django_request, OLD_SPELLINGS, None)
    if seen is None:
        seen = []
        setattr(django_request, OLD_SPELLINGS, seen)
    seen.extend(name for name in names if name not in seen)


class CamelJSONRenderer(JSONRenderer):
    """Every answer's keys in camelCase, the data fields' values verbatim: the library's rule, our walk."""

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        ignore = frozenset(_options().get("ignore_fields") or ())
        return super().render(camelize(data, ignore), accepted_media_type, renderer_context)


class CamelJSONParser(StrictJSONParser):
    """The strict JSON parser, then the body's keys to snake_case; an old snake_case key is remembered."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        request = (parser_context or {}).get("request")
        old = old_spellings(data)
        if refusal := retired(old):
            raise ParseError(refusal)
        if request is not None:
            _remember(request, old)
        try:
            return underscoreize(data, **_options())
        except (TypeError, ValueError) as exc:  # pragma: no cover - json_input only yields JSON types
            raise ParseError(f"body: {exc}") from None


def deprecation_headers(response: HttpResponse, names: list[str]) -> None:
    """The RFC 9745 ``Deprecation``, the RFC 8594 ``Sunset`` and one 299 ``Warning`` per old spelling used."""
    response["Deprecation"] = f"@{int(DEPRECATED_SINCE.timestamp())}"
    response["Sunset"] = format_datetime(SUNSET, usegmt=True)
    response["Warning"] = ", ".join(f'299 - "{name} is deprecated: spell it {camel(name)}"' for name in names)


class CamelQueryMiddleware:
    """Query parameter names under ``/api/`` to snake_case for the views; old spellings answered with headers.

    Only the names change, never a value. ``/api/schema/`` and the docs pages are left alone.
    """

    SKIP = ("/api/schema/", "/api/docs/", "/api/redoc/")

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        if not path.startswith(PREFIX) or path.startswith(self.SKIP):
            return self.get_response(request)
        if request.GET:
            old = [name for name in request.GET if camel(name) != name]
            if refusal := retired(old):
                return JsonResponse({"error": "invalid", "detail": refusal}, status=400)
            _remember(request, old)
            request.GET = underscoreize(request.GET, **_options())
        response = self.get_response(request)
        if names := getattr(request, OLD_SPELLINGS, None):
            deprecation_headers(response, names)
        return response


def camelize_query_parameters(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular hook: every query parameter's name in camelCase (a path's ``{run_id}`` keeps its name)."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query":
                    parameter["name"] = camel(parameter["name"])
    return result
