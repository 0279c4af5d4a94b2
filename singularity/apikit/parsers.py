"""The API's one request parser: JSON refused where no database can hold it (a NUL, a lone surrogate, nesting).

``StrictJSONParser`` reads the body with ``singularity.json_input`` and
answers 400 ``invalid`` naming the place (``input.ticket: contains a NUL …``).
"""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from singularity import json_input


class StrictJSONParser(parsers.JSONParser):
    #: A NUL passes to the view, which makes it storable itself (the run report: ``grading.api_runs``).
    nul_allowed = False

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        try:
            return json_input.loads(stream.read(), nul=self.nul_allowed)
        except json_input.JsonRefused as exc:
            raise ParseError(str(exc)) from None
