"""Request parsers that refuse what no database can hold: a NUL or a lone surrogate, nesting past the bound.

``StrictJSONParser`` reads the body with ``singularity.json_input`` and
answers 400 ``invalid`` naming the place (``input.ticket: contains a NUL …``);
the form parsers check each field the same way.
"""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from singularity import json_input


class StrictJSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        try:
            return json_input.loads(stream.read())
        except json_input.JsonRefused as exc:
            raise ParseError(str(exc)) from None


def _check_fields(data: Any) -> Any:
    for name, values in data.lists():
        for value in [name, *values]:
            if isinstance(value, str) and (problem := json_input.text_problem(value)):
                raise ParseError(f"{json_input.JsonRefused(name, problem)}")
    return data


class StrictFormParser(parsers.FormParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        return _check_fields(super().parse(stream, media_type, parser_context))


class StrictMultiPartParser(parsers.MultiPartParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        result = super().parse(stream, media_type, parser_context)
        _check_fields(result.data)
        return result
