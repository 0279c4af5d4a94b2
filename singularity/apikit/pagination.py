"""Page sizes and offsets read strictly: a value that is no number of rows is a 400 naming the parameter.

DRF's own parsing lets ``?limit=18446744073709551616`` through to the database
(a 500 on both backends) and quietly ignores ``?limit=ten``; here both are
refused, by the same parser every list uses.
"""

from __future__ import annotations

from typing import Any

from rest_framework.pagination import CursorPagination, LimitOffsetPagination

from singularity.apikit.errors import BadParameter

#: The most rows one page of a list answers.
MAX_PAGE = 500
#: The largest offset any database takes (a signed 64-bit integer).
MAX_OFFSET = 2**63 - 1


def parse_count(raw: Any, *, name: str, default: int, low: int, high: int) -> int:
    """Return ``raw`` (a query parameter) as a whole number from ``low`` to ``high``, ``default`` when absent.

    Raises BadParameter naming ``name`` otherwise.
    """
    if raw is None or raw == "":
        return default
    text = str(raw).strip()
    if not text.isdigit() or len(text) > 19 or not low <= int(text) <= high:
        raise BadParameter(f"{name}: {str(raw)[:40]!r} is not a whole number from {low} to {high}")
    return int(text)


def parse_limit(raw: Any, *, default: int, maximum: int = MAX_PAGE, name: str = "limit") -> int:
    """The page size ``raw`` asks for: 1 to ``maximum``; BadParameter naming ``name`` otherwise."""
    return parse_count(raw, name=name, default=default, low=1, high=maximum)


class LimitOffset(LimitOffsetPagination):
    """``?limit=`` (1 to MAX_PAGE, default PAGE_SIZE) and ``?offset=`` (0 or more), each refused when not."""

    max_limit = MAX_PAGE

    def get_limit(self, request: Any) -> int:
        return parse_limit(request.query_params.get(self.limit_query_param), default=self.default_limit)

    def get_offset(self, request: Any) -> int:
        raw = request.query_params.get(self.offset_query_param)
        return parse_count(raw, name=self.offset_query_param, default=0, low=0, high=MAX_OFFSET)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["schema"].update({"minimum": 1, "maximum": MAX_PAGE})
            if parameter["name"] == self.offset_query_param:
                parameter["schema"].update({"minimum": 0, "maximum": MAX_OFFSET})
        return parameters


class NewestCursor(CursorPagination):
    """Cursor pages whose ``?limit=`` is read by ``parse_limit`` (a subclass sets ordering and sizes)."""

    page_size_query_param = "limit"

    def get_page_size(self, request: Any) -> int:
        return parse_limit(
            request.query_params.get(self.page_size_query_param),
            default=self.page_size,
            maximum=self.max_page_size or MAX_PAGE,
        )
