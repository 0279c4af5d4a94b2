"""One paging style for every list under ``/api/`` (issue 36): ``?cursor=`` and ``?limit=``, answering
``{"results": [...], "nextCursor": <string or null>}``.

``limit`` is 1 to ``MAX_PAGE`` (``PAGE_SIZE`` when absent) on every list, the loop's reads included (the seed's
loop_history bounds, R20.23); ``cursor`` is opaque: a previous answer's ``nextCursor``, null on the last page.
A page is the rows after the cursor in the list's own order (its queryset's ``order_by``, which must end in a
unique field), read by the values of every ordering field, so rows added or removed between two pages never
make one repeat or go missing. ``?offset=`` is no parameter of any list: ``singularity.apikit.query`` refuses it
saying to pass ``cursor`` instead. A ``limit`` or ``cursor`` that is not one is a 400 naming it; DRF's own
parsing would let ``?limit=18446744073709551616`` through to the database and quietly ignore ``?limit=ten``.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db.models import Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response

from singularity.apikit.errors import BadParameter

#: The most rows one page of any list answers (the seed's loop_history bound, R20.23).
MAX_PAGE = 100
#: The rows a page answers when ``limit`` is absent, on every list (loop_history's default, R20.23).
PAGE_SIZE = 20
CURSOR_HELP = "A previous answer's nextCursor (opaque): the page after it. Absent: the first page."
LIMIT_HELP = f"Rows per page: 1 to {MAX_PAGE}, default {PAGE_SIZE}."
NEXT_HELP = "Pass it back as cursor for the next page; null on the last page."
#: ``cursor`` and ``limit`` as a view that pages by hand (the loop's reads, answering the seed's list key and
#: ``nextCursor``) documents them: as every list does.
PAGING = [
    OpenApiParameter("cursor", OpenApiTypes.STR, description=CURSOR_HELP),
    OpenApiParameter(
        "limit", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": PAGE_SIZE}, description=LIMIT_HELP
    ),
]


def parse_count(raw: Any, *, name: str, default: int, low: int, high: int) -> int:
    """Return ``raw`` (a query parameter) as a whole number from ``low`` to ``high``, ``default`` when absent.

    Raises BadParameter naming ``name`` otherwise.
    """
    if raw is None or raw == "":
        return default
    text = str(raw).strip()
    if isinstance(raw, bool) or not text.isdigit() or len(text) > 19 or not low <= int(text) <= high:
        raise BadParameter(f"{name}: {str(raw)[:40]!r} is not a whole number from {low} to {high}")
    return int(text)


def parse_limit(raw: Any, *, default: int = PAGE_SIZE, maximum: int = MAX_PAGE, name: str = "limit") -> int:
    """The page size ``raw`` asks for: 1 to ``maximum``; BadParameter naming ``name`` otherwise."""
    return parse_count(raw, name=name, default=default, low=1, high=maximum)


def page_size(raw: Any) -> int:
    """``parse_limit`` for the loop's reads, which refuse with ValueError naming ``limit``."""
    try:
        return parse_limit(raw)
    except BadParameter as exc:
        raise ValueError(str(exc.detail)) from None


def _plain(value: Any) -> Any:
    """A cursor value as JSON: instants and dates in ISO form (to the microsecond), ids as text."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, Decimal)):
        return str(value)
    return value


def keys(queryset: QuerySet[Any]) -> list[tuple[str, bool]]:
    """The list's order as (field's attribute name, descending); ImproperlyConfigured when it cannot page.

    The order is the queryset's ``order_by`` (else its model's): plain, non-null fields of its model, the last
    of them unique (the primary key, say), so the rows after a cursor are exactly the ones not yet answered.
    """
    model = queryset.model
    query = queryset.query
    order = list(query.order_by) or (list(model._meta.ordering) if query.default_ordering else [])
    found: list[tuple[str, bool]] = []
    for item in order:
        if not isinstance(item, str) or "__" in item or item.lstrip("-") == "?":
            raise ImproperlyConfigured(f"{model.__name__}: cursor pages need plain ordering fields, not {item!r}")
        name = item.lstrip("-")
        field = model._meta.pk if name == "pk" else model._meta.get_field(name)
        if field.null:
            raise ImproperlyConfigured(f"{model.__name__}.{name}: a nullable field cannot order cursor pages")
        found.append((field.attname, item.startswith("-")))
    if not found or not model._meta.get_field(found[-1][0]).unique:
        raise ImproperlyConfigured(
            f"{model.__name__}: a cursor-paged list must be ordered ending in a unique field (e.g. -id), not {order!r}"
        )
    return found


def _after(fields: list[tuple[str, bool]], values: list[Any]) -> Q:
    """The rows after ``values`` in the order ``fields``: (a, b) after (x, y) is a past x, or a = x and b past y."""
    after = Q()
    for index in reversed(range(len(fields))):
        name, descending = fields[index]
        step = Q(**{f"{name}__{'lt' if descending else 'gt'}": values[index]})
        after = step if index == len(fields) - 1 else step | (Q(**{name: values[index]}) & after)
    return after


def _encode(row: Any, fields: list[tuple[str, bool]]) -> str:
    text = json.dumps([_plain(getattr(row, name)) for name, _ in fields], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode(raw: str, queryset: QuerySet[Any], fields: list[tuple[str, bool]]) -> list[Any]:
    meta = queryset.model._meta
    try:
        text = base64.urlsafe_b64decode((raw + "=" * (-len(raw) % 4)).encode()).decode()
        values = json.loads(text)
        if not isinstance(values, list) or len(values) != len(fields):
            raise ValueError("not this list's cursor")
        decoded = []
        for (name, _), value in zip(fields, values, strict=True):
            field = meta.get_field(name)
            decoded.append(field.to_python(value))
            field.run_validators(decoded[-1])  # an integer past the database's range, say
        return decoded
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, ValidationError):
        raise BadParameter(
            f"cursor: {raw[:40]!r} is not a page of this list (pass a previous answer's nextCursor back)"
        ) from None


def page_of(queryset: QuerySet[Any], cursor: str | None, size: int) -> tuple[list[Any], str | None]:
    """The ``size`` rows of ``queryset`` after ``cursor`` (from the first when none) and the cursor after them
    (None on the last page). BadParameter naming ``cursor`` when it is none this list gave."""
    fields = keys(queryset)
    if cursor not in (None, ""):
        queryset = queryset.filter(_after(fields, _decode(str(cursor), queryset, fields)))
    rows = list(queryset[: size + 1])
    page = rows[:size]
    return page, (_encode(page[-1], fields) if len(rows) > size else None)


class Cursor(CursorPagination):
    """The API's pagination (``DEFAULT_PAGINATION_CLASS``): keyset pages over the list's own ordering (``page_of``).

    A list whose queryset is not ordered as ``keys`` needs is a programming error (ImproperlyConfigured), never
    a page that repeats.
    """

    cursor_query_param = "cursor"
    page_size_query_param = "limit"
    page_size = PAGE_SIZE
    max_page_size = MAX_PAGE
    ordering = ()  # the queryset's own (DRF's attribute, unused here)

    def paginate_queryset(self, queryset: QuerySet[Any], request: Any, view: Any = None) -> list[Any]:
        self.request = request
        size = parse_limit(request.query_params.get(self.page_size_query_param), default=self.page_size)
        page, self.next_cursor = page_of(queryset, request.query_params.get(self.cursor_query_param), size)
        return page

    def get_paginated_response(self, data: Any) -> Response:
        return Response({"results": data, "nextCursor": self.next_cursor})

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["results", "nextCursor"],
            "properties": {
                "results": schema,
                "nextCursor": {"type": "string", "nullable": True, "description": NEXT_HELP},
            },
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": CURSOR_HELP,
                "schema": {"type": "string"},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": LIMIT_HELP,
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": PAGE_SIZE},
            },
        ]
